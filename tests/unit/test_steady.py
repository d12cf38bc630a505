"""The fast path's steady set (sim/sched/steady.py): skipped and deferred manager calls,
steady decodes and running-total snapshots give byte-identical results to the reference loop,
for the paged manager and the contiguous ones, with async scheduling and without."""
from __future__ import annotations

from typing import Any

import pytest

from allocator.interface import ManagerConfig
from allocator.paged import PagedKVCacheManager
from allocator.profiles import profile_for
from sim.cost.gpus import get_gpu
from sim.cost.models import get_model
from sim.cost.step_model import make_step_model
from sim.sched.fast_path import fast_path_refusal
from sim.sched.plan import StepPlan
from sim.sched.state import SchedState
from sim.sched.steady import SteadySet
from sim.workload.sequence import WAITING, Seq
from sim.workload.workload import Workload
from tests.unit.simkit import fast_and_reference, run_config, simulate
from traces import default_workload, limit

MODEL = make_step_model("roofline", get_model("llama-2-7b"), get_gpu("a100-80gb"))


def count_steady_work(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts, while the test runs, what the async fast path did: steady decodes launched,
    sequences woken while their step ran (owed its output), of them the preempted ones, and
    finished sequences with tokens still counted in flight (a lost update)."""
    counts = {"steady": 0, "owed": 0, "owed_preempted": 0, "left_in_flight": 0}
    launched, take_owed = SteadySet.launched, SteadySet.take_owed
    finish_seq = SchedState.finish_seq

    def spy_launched(self: SteadySet, plan: StepPlan) -> None:
        counts["steady"] += plan.num_steady
        launched(self, plan)

    def spy_take_owed(self: SteadySet) -> list[Seq]:
        owed = take_owed(self)
        counts["owed"] += len(owed)
        counts["owed_preempted"] += sum(1 for seq in owed if seq.status == WAITING)
        return owed

    def spy_finish_seq(self: SchedState, seq: Seq, plan: StepPlan | None) -> None:
        counts["left_in_flight"] += seq.req.num_in_flight_tokens != 0
        finish_seq(self, seq, plan)

    monkeypatch.setattr(SteadySet, "launched", spy_launched)
    monkeypatch.setattr(SchedState, "finish_seq", spy_finish_seq)
    monkeypatch.setattr(SteadySet, "take_owed", spy_take_owed)
    return counts


@pytest.mark.parametrize("options", [
    {"num_gpu_blocks": 150},
    {"num_gpu_blocks": 150, "max_num_batched_tokens": 400},
    {"num_gpu_blocks": 150, "prefix_caching": False},
    {"num_gpu_blocks": 200, "n": 2, "sampling_mode": "fanout"},
], ids=["preempting", "tight-budget", "no-caching", "fanout"])
def test_paged_fast_path_is_byte_identical(options: dict[str, Any]) -> None:
    """Shared system prompts, preemptions and budget cuts: same steps, requests, summary."""
    fast, _ = fast_and_reference(limit(default_workload(seed=3), 50), model=MODEL, **options)
    assert fast.summary["num_finished"] == 50


@pytest.mark.parametrize("options", [
    {"num_gpu_blocks": 150},
    {"num_gpu_blocks": 150, "max_num_batched_tokens": 400},
    {"num_gpu_blocks": 150, "prefix_caching": False},
    {"num_gpu_blocks": 200, "n": 2, "sampling_mode": "fanout"},
    {"num_gpu_blocks": 1500},
], ids=["preempting", "tight-budget", "no-caching", "fanout", "roomy"])
def test_paged_fast_path_under_async_is_byte_identical(
        options: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Async scheduling: steady decodes counted at launch, sequences woken (and preempted)
    while their step runs: same steps, requests, summary and counters as the reference."""
    counts = count_steady_work(monkeypatch)
    fast, _ = fast_and_reference(limit(default_workload(seed=3), 50), model=MODEL,
                                 async_scheduling=True, **options)
    assert fast.summary["num_finished"] == 50
    assert fast.counters["num_overlapped_steps"] > fast.counters["num_steps"] / 2
    assert counts["steady"] > fast.counters["num_steps"]
    assert counts["left_in_flight"] == 0, "a finished sequence kept tokens in flight"
    if options["num_gpu_blocks"] < 1500:
        assert fast.summary["num_preemptions"] > 0 and counts["owed_preempted"] > 0


@pytest.mark.parametrize("version", ["0.14", "0.19", "0.33"])
@pytest.mark.parametrize("options", [
    {"num_gpu_blocks": 150},
    {"num_gpu_blocks": 150, "max_num_batched_tokens": 400},
    {"num_gpu_blocks": 150, "prefix_caching": False},
    {"num_gpu_blocks": 150, "max_num_batched_tokens": 600, "long_prefill_token_threshold": 96},
], ids=["preempting", "tight-budget", "no-caching", "long-prefill"])
def test_paged_fast_path_is_byte_identical_under_profiles(version: str,
                                                          options: dict[str, Any]) -> None:
    """Under the 0.14, 0.19 and 0.33 profiles (free order, admission gate, lone-request
    rule): the fast path gives the reference loop's steps, requests and summary."""
    fast, _ = fast_and_reference(limit(default_workload(seed=3), 50), model=MODEL,
                                 vllm_profile=profile_for(version), **options)
    assert fast.summary["num_finished"] == 50


def test_profiles_change_the_run() -> None:
    """The tight-budget case really differs between 0.14 and 0.19 (the gate binds), so the
    profile tests above compare different runs."""
    trace = limit(default_workload(seed=3), 50)
    runs = [simulate(trace, model=MODEL, num_gpu_blocks=150, max_num_batched_tokens=400,
                     vllm_profile=profile_for(v)).summary for v in ("0.14", "0.19")]
    assert runs[0]["num_preemptions"] != runs[1]["num_preemptions"]


def test_priority_runs_the_reference_loop() -> None:
    """Priority scheduling picks victims off running order: the fast path says why it is
    refused, and the run equals one with --no-fast."""
    trace = limit(default_workload(seed=3), 30)
    config = run_config(num_gpu_blocks=150, scheduling_policy="priority")
    manager = PagedKVCacheManager.from_config(ManagerConfig(num_gpu_blocks=150))
    assert fast_path_refusal(manager, config, Workload(trace, config, None)) == \
        "priority scheduling"
    fast = simulate(trace, model=MODEL, num_gpu_blocks=150, scheduling_policy="priority")
    ref = simulate(trace, model=MODEL, num_gpu_blocks=150, scheduling_policy="priority",
                   fast=False)
    assert not fast.fast and fast.log.step_columns() == ref.log.step_columns()


def test_paged_fast_path_exercised_preemption_and_hits() -> None:
    """The preempting case really preempts, hits the cache and coasts through quiet steps,
    some with finishes (so the test means something)."""
    result = simulate(limit(default_workload(seed=3), 50), model=MODEL, num_gpu_blocks=150)
    assert result.summary["num_preemptions"] > 0
    assert result.summary["prefix_hit_rate"] > 0
    assert result.counters["num_coasted_steps"] > 0
    assert result.counters["num_coasted_finishing_steps"] > 0


@pytest.mark.parametrize("name, options", [
    ("max", {"num_gpu_blocks": 1200}),
    ("pow2", {"num_gpu_blocks": 600, "max_num_batched_tokens": 400}),
    ("oracle", {"num_gpu_blocks": 400, "n": 3, "sampling_mode": "cow"}),
    ("ft", {"num_gpu_blocks": 900}),
    ("max", {"num_gpu_blocks": 1200, "placement": "first-fit", "n": 2,
             "sampling_mode": "fanout"}),
], ids=["max", "pow2-tight-budget", "oracle-cow-apart", "ft", "max-first-fit-fanout"])
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_contiguous_fast_path_is_byte_identical(name: str, options: dict[str, Any],
                                                async_scheduling: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Contiguous managers: deferred calls of steady decodes, replayed when they wake (under
    async with the placeholder the reference call saw), give the reference loop's steps
    (memory columns included), requests and summary."""
    counts = count_steady_work(monkeypatch)
    fast, _ = fast_and_reference(limit(default_workload(seed=5), 80), name, MODEL,
                                 async_scheduling=async_scheduling, **options)
    assert fast.summary["kv_external_frag_frac"] or fast.summary["kv_reserved_frac"]
    if async_scheduling and options.get("sampling_mode") != "cow":  # cow forks: sync
        assert counts["steady"] > fast.counters["num_steps"]
        assert fast.counters["num_overlapped_steps"] > fast.counters["num_steps"] / 2
    else:
        assert fast.counters["num_coasted_steps"] > 0


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", ["paged", "max"])
def test_debug_checks_fast_snapshot_every_step(name: str, async_scheduling: bool) -> None:
    """--debug compares the running-total snapshot with memory_snapshot() after each step,
    before the deferred calls are replayed (and the restored counts of steady sequences)."""
    trace = limit(default_workload(seed=4), 40)
    result = simulate(trace, name, MODEL, num_gpu_blocks=200 if name == "paged" else 1200,
                      debug=True, async_scheduling=async_scheduling)
    assert result.fast and result.summary["leaked_blocks"] == 0
    assert result.summary["num_finished"] > 30
    assert name != "paged" or result.summary["num_preemptions"] > 0


def test_fast_path_only_where_proven() -> None:
    """Paged cow forks, beams and swap run the reference loop; contiguous cow samples
    (independent sequences) take the fast path."""
    trace = limit(default_workload(seed=3), 5)
    assert not simulate(trace, num_gpu_blocks=300, n=2).fast
    assert not simulate(trace, "max", num_gpu_blocks=300, beam_width=2).fast
    assert not simulate(trace, num_gpu_blocks=300, preemption="swap", num_cpu_blocks=64).fast
    assert simulate(trace, "oracle", num_gpu_blocks=300, n=2).fast
