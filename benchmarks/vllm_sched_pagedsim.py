"""pagedsim's side of ``vllm_diff.py --scheduler``: its Scheduler stepped over one stream.

The stream's configuration becomes simulate.py ``Options`` (reference loop, no up-front pool
check: vLLM has none), the block manager follows ``profile_for(version)``, and each step adds
its arrivals, plans and applies the plan with the stream's fixed output tokens, giving the
worker's record. Newer options (policy, spec decoding, async, release) go by their agreed
names when ``Options`` has them; ``unavailable`` names the stream features it cannot express.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from vllm_sched_stream import accepted_drafts, empty_record

from allocator.hashing import get_request_block_hasher, sha256
from allocator.interface import ManagerConfig
from allocator.profiles import profile_for
from allocator.registry import make_manager
from allocator.request import Request
from sim.cli import resolve
from sim.config import Options, RunConfig
from sim.results.metrics import RunLog
from sim.sched.scheduler import Scheduler
from sim.sched.spec_rules import set_eagle
from sim.workload.sequence import Group, Seq

FIELDS = {f.name for f in dataclasses.fields(Options)}
FEATURES = {
    "priority": ("scheduling_policy",),
    "spec decoding": ("speculative_config",),
    "async": ("async_scheduling",),
}
"""Each stream feature and the ``Options`` fields pagedsim needs to express it."""


def unavailable(config: dict[str, Any]) -> list[str]:
    """The stream's features whose options this pagedsim's ``Options`` lacks."""
    used = {"priority": config["policy"] == "priority", "spec decoding": config["spec"] > 0,
            "async": config["async"]}
    return [name for name, needs in FEATURES.items()
            if used[name] and not all(f in FIELDS for f in needs)]


def make_options(config: dict[str, Any], version: str) -> Options:
    """simulate.py's options for the stream (the agreed names where this pagedsim has them)."""
    wanted: dict[str, Any] = {
        "block_size": config["block_size"], "num_gpu_blocks": config["num_blocks"],
        "max_num_seqs": config["max_num_seqs"],
        "max_num_batched_tokens": config["max_num_batched_tokens"],
        "max_model_len": config["max_model_len"], "chunked_prefill": config["chunked_prefill"],
        "prefix_caching": config["prefix_caching"], "fast": False, "progress": False,
        "vllm_version": version, "scheduling_policy": config["policy"],
        "async_scheduling": config["async"],
        "speculative_config": (json.dumps({"method": config.get("spec_method", "ngram"),
                                           "num_speculative_tokens": config["spec"]})
                               if config["spec"] else None),
    }
    return Options(**{k: v for k, v in wanted.items() if k in FIELDS})


def arrival_time(spec: dict[str, Any]) -> float:
    """The request's arrival as the worker gives it to vLLM (its step, then its id), so that
    priority ties break the same way on both sides."""
    return spec["arrival"] + int(spec["id"][1:]) * 1e-6


class StreamWorkload:
    """What the scheduler asks of a workload, over the stream's requests (n = 1, no beams)."""

    def __init__(self, requests: list[dict[str, Any]], hasher: Any) -> None:
        self.specs = {spec["id"]: spec for spec in requests}
        self.hasher = hasher
        self.n = [1] * len(requests)
        self.beam_width = [1] * len(requests)
        self.acceptance_rates: list[float] | None = None  # the worker chooses accepted counts

    def make_group(self, index: int, spec: dict[str, Any], max_model_len: int) -> Group:
        """The request's group; its output stops at ``max_model_len`` (as vLLM's does)."""
        prompt = len(spec["prompt"])
        out = min(spec["max_tokens"], max_model_len - prompt)
        group = Group(index, spec["id"], arrival_time(spec), prompt, out, out, 1, 1, None)
        group.priority = spec["priority"]  # the waiting order and the victim read the group's
        return group

    def first_seqs(self, group: Group, split: bool) -> list[Seq]:
        spec = self.specs[group.request_id]
        out = group.output_len
        req = Request(spec["id"], spec["prompt"], out,
                      arrival_time=arrival_time(spec),
                      priority=spec["priority"], block_hasher=self.hasher,
                      final_output_len=out)
        return [Seq(req, group, 0, spec["id"], spec["outputs"][:out])]


def build(stream: dict[str, Any], version: str) -> tuple[Scheduler, StreamWorkload]:
    """pagedsim's scheduler for the stream, its block manager under ``version``'s profile."""
    config = stream["config"]
    run: RunConfig = resolve(make_options(config, version))
    profile = profile_for(version)
    manager = make_manager("paged", ManagerConfig(
        num_gpu_blocks=config["num_blocks"], block_size=config["block_size"],
        max_model_len=config["max_model_len"], enable_caching=config["prefix_caching"],
        log_stats=False, vllm_profile=profile))
    # EAGLE and the hash lookahead as the engine sets them (sim/engine.py)
    lookahead = set_eagle(manager, run.scheduler, config["prefix_caching"])
    hasher = (get_request_block_hasher(config["block_size"], sha256, profile.extra_keys,
                                       lookahead) if config["prefix_caching"] else None)
    workload = StreamWorkload(stream["requests"], hasher)
    sched = Scheduler(manager, run, workload, RunLog(len(stream["requests"])))  # type: ignore[arg-type]
    spec = sched.extras.spec if sched.extras is not None else None
    if spec is not None:  # the accepted drafts the worker gives vLLM, not pagedsim's own draws
        seed = config["seed"]
        spec.accept = lambda seq, drafts: accepted_drafts(seed, seq.request_id, seq.num_out,
                                                          drafts)
    return sched, workload


def _apply(sched: Scheduler, finished: list[str], plan: Any, record: dict[str, Any],
           step: int) -> None:
    """A step's outputs; the requests they finish go into that step's record."""
    finished.clear()
    sched.apply(plan, step + 0.5, float(step))
    record["finished"] = list(finished)


def run_pagedsim(stream: dict[str, Any], version: str) -> list[dict[str, Any]]:
    """pagedsim's per-step records over the stream (the worker's record format)."""
    sched, workload = build(stream, version)
    state = sched.state
    finished: list[str] = []
    state.on_finish = lambda group: finished.append(group.request_id)
    arrivals: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for index, spec in enumerate(stream["requests"]):
        arrivals.setdefault(spec["arrival"], []).append((index, spec))
    records = []
    max_model_len = stream["config"]["max_model_len"]
    overlap = bool(stream["config"]["async"])
    in_flight: tuple[Any, dict[str, Any], int] | None = None
    for step in range(stream["config"]["num_steps"]):
        for index, spec in arrivals.get(step, ()):
            sched.admission.add_group(workload.make_group(index, spec, max_model_len))
        before = [seq.request_id for seq in state.running.values()]
        plan = sched.schedule(float(step))
        record = empty_record()
        after = [seq.request_id for seq in state.running.values()]
        record["admitted"] = [rid for rid in after if rid not in before]
        record["preempted"] = [rid for rid in reversed(before) if rid not in after]
        record["blocks"] = {rid: list(sched.manager.get_block_ids(rid)[0]) for rid in after}
        if plan is not None:
            record["scheduled"] = [[seq.request_id, n] for seq, n in zip(plan.seqs, plan.tokens)]
        records.append(record)
        # As the worker does: under async the step before's output arrives after this step
        # is scheduled; else this step's output arrives at once.
        if in_flight is not None:
            _apply(sched, finished, *in_flight)
            in_flight = None
        if plan is not None:
            in_flight = (plan, record, step)
            if not overlap:
                _apply(sched, finished, *in_flight)
                in_flight = None
    return records
