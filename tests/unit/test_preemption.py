"""Preemption (sim/sched/preemption.py): the last running sequence is the victim; recompute
or swap, and the fallback when the CPU pool is full."""
from __future__ import annotations

import pytest

from tests.unit.simkit import make_trace, rows, simulate, steps


@pytest.mark.parametrize("fast", [True, False])
def test_forced_preemption_recompute(fast: bool) -> None:
    """6 usable blocks: two 40-token prompts (3 blocks each) fill the pool; when the first
    needs a 4th block the last admitted is preempted, then recomputed after the first ends."""
    result = simulate(make_trace([(0.0, 40, 20), (0.0, 40, 20)]), num_gpu_blocks=7,
                      fast=fast)
    first, second = rows(result)
    assert first["num_preemptions"] == 0 and second["num_preemptions"] == 1
    assert result.summary["num_preemptions"] == 1
    assert second["finish_s"] > first["finish_s"]
    # Re-admission finds the victim's own cached full blocks again.
    assert sum(steps(result)["prefix_hits"]) > 0
    assert result.summary["leaked_blocks"] == 0


def test_swap_preemption_moves_blocks_over_pcie() -> None:
    """Same squeeze as the recompute test, with swap: the victim's 3 blocks go out and come
    back; no recomputation (no prefix queries after the first admissions)."""
    result = simulate(make_trace([(0.0, 40, 20), (0.0, 40, 20)]), num_gpu_blocks=7,
                      preemption="swap", num_cpu_blocks=8, swap_time=lambda k: 0.001 * k)
    cols = steps(result)
    assert sum(cols["swap_out_blocks"]) == 3 and sum(cols["swap_in_blocks"]) == 3
    assert sum(cols["prefix_queries"]) == 80
    assert sum(cols["swap_s"]) == pytest.approx(0.006)
    _first, second = rows(result)
    assert second["num_preemptions"] == 1 and second["status"] == "finished"
    assert result.summary["leaked_blocks"] == 0


def test_swap_without_cpu_room_falls_back_to_recompute() -> None:
    """A CPU pool of 1 block cannot take 3: the preemption recomputes instead."""
    result = simulate(make_trace([(0.0, 40, 20), (0.0, 40, 20)]), num_gpu_blocks=7,
                      preemption="swap", num_cpu_blocks=1)
    assert result.counters["num_swap_fallbacks"] == 1
    assert sum(steps(result)["swap_out_blocks"]) == 0
    assert result.summary["num_finished"] == 2
