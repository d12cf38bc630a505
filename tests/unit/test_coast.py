"""Coasting (sim/sched/coast.py): runs of quiet steps taken in one go end exactly where
step-by-step timeouts would, with every output equal to the reference loop's, with async
scheduling (the plan in flight handed back to the engine) and without."""
from __future__ import annotations

from collections.abc import Sequence

import pytest

from sim.cost.step_base import StepModel, StepTime
from tests.unit.simkit import fast_and_reference, make_trace
from tests.unit.test_steady import MODEL
from traces import default_workload, limit


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("num_gpu_blocks", [400, 1500])
def test_coasting_is_byte_identical(num_gpu_blocks: int, async_scheduling: bool) -> None:
    """300 requests over a tight pool (preempting) and a roomier one (most steps coasted,
    many with finishes when synchronous): every output equals the reference loop's."""
    trace = limit(default_workload(seed=8), 300)
    fast, _ = fast_and_reference(trace, model=MODEL, num_gpu_blocks=num_gpu_blocks,
                                 async_scheduling=async_scheduling)
    assert fast.summary["num_preemptions"] > 0
    assert fast.counters["num_coasted_steps"] > fast.counters["num_steps"] / 10
    if async_scheduling:
        assert fast.counters["num_overlapped_steps"] > fast.counters["num_steps"] / 2
    else:
        assert fast.counters["num_coasted_finishing_steps"] > 0


class _BinaryStep(StepModel):
    """Every step takes 1/64 s: sums of step times are exact in binary floating point."""

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        return StepTime(0.0, 1 / 64, 0.0)


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", ["paged", "oracle"])
def test_coasting_with_step_ends_on_arrival_times_is_byte_identical(
        name: str, async_scheduling: bool) -> None:
    """Exact 1/64 s steps and arrivals on a 1/16 s grid: many steps end exactly when a
    request arrives (the tie that must stop coasting), and outputs equal the reference's."""
    rows = [(i / 16, 30 + (7 * i) % 90, 5 + (11 * i) % 60) for i in range(200)]
    fast, _ = fast_and_reference(make_trace(rows), name, _BinaryStep(), num_gpu_blocks=600,
                                 async_scheduling=async_scheduling)
    assert fast.counters["num_coasted_steps"] > 0
