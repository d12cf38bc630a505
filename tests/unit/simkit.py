"""Helpers for the simulator tests: a fixed-time step model, tiny traces and one-call runs."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.options import SchedulerConfig
from sim.run import RunResult, run_allocator
from sim.cost.step_base import StepModel, StepTime
from traces import Trace, TraceRequest

STEP_S = 0.01


class FixedStep(StepModel):
    """Every step takes STEP_S seconds (all of it 'linear'), whatever the batch."""

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        return StepTime(0.0, STEP_S, 0.0)


def make_trace(rows: Sequence[tuple[float, int, int]], **kwargs: Any) -> Trace:
    """A trace from (arrival_s, prompt_len, output_len) rows; ids "r0", "r1", ..."""
    reqs = [TraceRequest(f"r{i}", a, p, o, line=i + 2) for i, (a, p, o) in enumerate(rows)]
    return Trace.from_requests(reqs, **kwargs)


def simulate(trace: Trace, name: str = "paged", model: StepModel | None = None,
             swap_time: Any = None, **options: Any) -> RunResult:
    """Run one allocator on ``trace`` with SchedulerConfig(**options) (64 blocks default)."""
    options.setdefault("num_gpu_blocks", 64)
    config = SchedulerConfig(**options)
    return run_allocator(name, trace, config, model or FixedStep(),
                         swap_time or (lambda blocks: 0.0))


def rows(result: RunResult) -> list[dict[str, Any]]:
    """The request rows of a run, one dict per request in trace order."""
    cols = result.log.request_columns()
    return [dict(zip(cols, values)) for values in zip(*cols.values())]


def steps(result: RunResult) -> dict[str, list[Any]]:
    """The step columns of a run."""
    return result.log.step_columns()
