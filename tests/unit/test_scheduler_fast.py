"""The shortcut test: the fast path (skipped no-op allocate_slots calls, steady decodes,
running-total snapshots) must give byte-identical results to the reference loop."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sim.cost.gpus import get_gpu
from sim.cost.models import get_model
from sim.cost.step_base import StepModel, StepTime
from sim.cost.step_model import make_step_model
from sim.engine import Costs, RunResult, replay
from tests.unit.simkit import make_trace, run_config
from traces import default_workload, limit

MODEL = make_step_model("roofline", get_model("llama-2-7b"), get_gpu("a100-80gb"))


def _run(fast: bool, trace: Any, model: Any = MODEL, **options: Any) -> RunResult:
    return replay("paged", run_config(fast=fast, **options), trace,
                  Costs(model, lambda blocks: 0.0))


def _same(a: RunResult, b: RunResult) -> None:
    assert a.fast and not b.fast
    assert a.log.step_columns() == b.log.step_columns()
    assert a.log.request_columns() == b.log.request_columns()
    sa, sb = dict(a.summary), dict(b.summary)
    del sa["wall_s"], sb["wall_s"]
    assert sa == sb


@pytest.mark.parametrize("options", [
    {"num_gpu_blocks": 150},
    {"num_gpu_blocks": 150, "max_num_batched_tokens": 400},
    {"num_gpu_blocks": 150, "prefix_caching": False},
    {"num_gpu_blocks": 200, "n": 2, "sampling_mode": "fanout"},
], ids=["preempting", "tight-budget", "no-caching", "fanout"])
def test_fast_path_is_byte_identical(options: dict[str, Any]) -> None:
    """Shared system prompts, preemptions and budget cuts: same steps, requests, summary."""
    trace = limit(default_workload(seed=3), 50)
    fast, ref = _run(True, trace, **options), _run(False, trace, **options)
    assert fast.summary["num_finished"] == 50
    _same(fast, ref)


def test_fast_path_exercised_preemption_and_hits() -> None:
    """The preempting case really preempts, hits the cache and coasts through quiet steps,
    some with finishes (so the test means something)."""
    result = _run(True, limit(default_workload(seed=3), 50), num_gpu_blocks=150)
    assert result.summary["num_preemptions"] > 0
    assert result.summary["prefix_hit_rate"] > 0
    assert result.counters["num_coasted_steps"] > 0
    assert result.counters["num_coasted_finishing_steps"] > 0


@pytest.mark.parametrize("num_gpu_blocks", [400, 1500])
def test_coasting_is_byte_identical(num_gpu_blocks: int) -> None:
    """300 requests over a tight pool (preempting) and a roomier one (most steps coasted,
    many with finishes): every output equals the reference loop's."""
    trace = limit(default_workload(seed=8), 300)
    fast = _run(True, trace, num_gpu_blocks=num_gpu_blocks)
    _same(fast, _run(False, trace, num_gpu_blocks=num_gpu_blocks))
    assert fast.summary["num_preemptions"] > 0
    assert fast.counters["num_coasted_steps"] > fast.counters["num_steps"] / 10
    assert fast.counters["num_coasted_finishing_steps"] > 0


def test_debug_checks_fast_snapshot_every_step() -> None:
    """--debug compares the running-total snapshot with memory_snapshot() after each step."""
    trace = limit(default_workload(seed=4), 40)
    result = _run(True, trace, num_gpu_blocks=200, debug=True)
    assert result.summary["leaked_blocks"] == 0 and result.summary["num_preemptions"] > 0


def test_fast_path_only_where_proven() -> None:
    """cow forks and swap run the reference loop."""
    trace = limit(default_workload(seed=3), 5)
    assert not _run(True, trace, num_gpu_blocks=300, n=2).fast
    assert not _run(True, trace, num_gpu_blocks=300, preemption="swap", num_cpu_blocks=64).fast


class _BinaryStep(StepModel):
    """Every step takes 1/64 s: sums of step times are exact in binary floating point."""

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        return StepTime(0.0, 1 / 64, 0.0)


def test_coasting_with_step_ends_on_arrival_times_is_byte_identical() -> None:
    """Exact 1/64 s steps and arrivals on a 1/16 s grid: many steps end exactly when a
    request arrives (the tie that must stop coasting), and outputs equal the reference's."""
    rows = [(i / 16, 30 + (7 * i) % 90, 5 + (11 * i) % 60) for i in range(200)]
    trace = make_trace(rows)
    fast = _run(True, trace, _BinaryStep(), num_gpu_blocks=600)
    _same(fast, _run(False, trace, _BinaryStep(), num_gpu_blocks=600))
    assert fast.counters["num_coasted_steps"] > 0
