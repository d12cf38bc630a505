"""Helpers for the simulator tests: a fixed-time step model, tiny traces and one-call runs."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from sim.config import (
    CacheConfig,
    GpuConfig,
    OutputConfig,
    RunConfig,
    SchedulerConfig,
    WorkloadConfig,
)
from sim.cost.gpus import get_gpu
from sim.cost.models import get_model
from sim.cost.step_base import StepModel, StepTime
from sim.engine import Costs, RunResult, replay
from traces import Trace, TraceRequest

STEP_S = 0.01
_PATH_COUNTERS = ("fast_path", "num_coasted_steps", "num_coasted_finishing_steps")
_PARTS = {"cache": CacheConfig, "scheduler": SchedulerConfig, "workload": WorkloadConfig,
          "output": OutputConfig}


class FixedStep(StepModel):
    """Every step takes STEP_S seconds (all of it 'linear'), whatever the batch."""

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        return StepTime(0.0, STEP_S, 0.0)


def make_trace(rows: Sequence[tuple[float, int, int]], **kwargs: Any) -> Trace:
    """A trace from (arrival_s, prompt_len, output_len) rows; ids "r0", "r1", ..."""
    reqs = [TraceRequest(f"r{i}", a, p, o, line=i + 2) for i, (a, p, o) in enumerate(rows)]
    return Trace.from_requests(reqs, **kwargs)


def run_config(**options: Any) -> RunConfig:
    """Llama-2-7B on one A100-80GB with 64 blocks; each option goes to the part (cache,
    scheduler, workload, output) that has a field of its name."""
    options.setdefault("num_gpu_blocks", 64)
    parts: dict[str, dict[str, Any]] = {name: {} for name in _PARTS}
    for key, value in options.items():
        part = next((name for name, cls in _PARTS.items()
                     if key in {f.name for f in fields(cls)}), None)
        if part is None:
            raise TypeError(f"no configuration part has a field {key!r}")
        parts[part][key] = value
    return RunConfig(model=get_model("llama-2-7b"), gpu=GpuConfig(get_gpu("a100-80gb")),
                     **{name: cls(**parts[name]) for name, cls in _PARTS.items()})


def simulate(trace: Trace, name: str = "paged", model: StepModel | None = None,
             swap_time: Any = None, **options: Any) -> RunResult:
    """Run one allocator on ``trace`` with ``run_config(**options)`` (64 blocks default)."""
    costs = Costs(model or FixedStep(), swap_time or (lambda blocks: 0.0))
    return replay(name, run_config(**options), trace, costs)


def fast_and_reference(trace: Trace, name: str = "paged", model: StepModel | None = None,
                       **options: Any) -> tuple[RunResult, RunResult]:
    """The same run with the fast path and with the reference loop; asserts that every step
    row, request row, summary value (wall time aside) and counter (those naming the path
    aside) is the same."""
    fast = simulate(trace, name, model, fast=True, **options)
    ref = simulate(trace, name, model, fast=False, **options)
    assert fast.fast and not ref.fast
    assert fast.log.step_columns() == ref.log.step_columns()
    assert fast.log.request_columns() == ref.log.request_columns()
    sa, sb = dict(fast.summary), dict(ref.summary)
    del sa["wall_s"], sb["wall_s"]
    assert sa == sb
    ca, cb = ({k: v for k, v in run.counters.items() if k not in _PATH_COUNTERS}
              for run in (fast, ref))
    assert ca == cb
    return fast, ref


def rows(result: RunResult) -> list[dict[str, Any]]:
    """The request rows of a run, one dict per request in trace order."""
    cols = result.log.request_columns()
    return [dict(zip(cols, values)) for values in zip(*cols.values())]


def steps(result: RunResult) -> dict[str, list[Any]]:
    """The step columns of a run."""
    return result.log.step_columns()
