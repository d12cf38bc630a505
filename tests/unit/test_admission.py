"""Admission (sim/sched/admission.py): prefix hits, up-front and late rejections, seats,
contiguous regions and request-level batches, each worked out on paper."""
from __future__ import annotations

import pytest

from tests.unit.simkit import STEP_S, make_trace, rows, simulate, steps
from traces import add_system_prompt


def test_two_requests_share_a_prefix() -> None:
    """82-token prompts (32 shared): the second hits the first's two full shared blocks."""
    trace = add_system_prompt(make_trace([(0.0, 50, 3), (1.0, 50, 3)]), 32)
    result = simulate(trace)
    first, second = rows(result)
    assert first["cached_tokens"] == 0
    assert second["cached_tokens"] == 32
    assert result.summary["prefix_hit_rate"] == pytest.approx(32 / (82 + 82))
    nocache = simulate(trace, "paged-nocache")
    assert rows(nocache)[1]["cached_tokens"] == 0
    assert nocache.summary["prefix_hit_rate"] is None


@pytest.mark.parametrize("name", ["paged", "oracle"])
def test_request_larger_than_the_pool_is_rejected(name: str) -> None:
    """2 usable blocks (32 slots): 20 + 20 tokens needs 39 (Oracle: 40) slots and can never
    run; the paged check is up front, the contiguous one when the request fails alone."""
    trace = make_trace([(0.0, 20, 20), (0.0, 10, 5)])
    result = simulate(trace, name, num_gpu_blocks=3, max_model_len=48)
    big, small = rows(result)
    assert big["status"] == "rejected" and big["rejection_reason"] == "exceeds_pool"
    assert small["status"] == "finished"
    assert result.summary["leaked_blocks"] == 0


def test_max_num_seqs_caps_the_batch() -> None:
    """max_num_seqs 2: the third request waits for a slot."""
    result = simulate(make_trace([(0.0, 10, 5)] * 3), max_num_seqs=2)
    assert max(steps(result)["num_running_seqs"]) == 2
    assert rows(result)[2]["first_scheduled_s"] == pytest.approx(5 * STEP_S)


def test_contiguous_waits_for_a_region() -> None:
    """Max reserves max_model_len (64 slots): a 64-slot arena holds one request at a time."""
    trace = make_trace([(0.0, 10, 5), (0.0, 10, 5)])
    result = simulate(trace, "max", num_gpu_blocks=5, max_model_len=64)
    first, second = rows(result)
    assert second["first_scheduled_s"] == pytest.approx(first["finish_s"])
    assert result.summary["kv_reserved_frac"] > 0


def test_ft_runs_request_level_batches() -> None:
    """FT: a request arriving while a batch runs waits until the whole batch is done."""
    trace = make_trace([(0.0, 10, 20), (0.0, 10, 2), (0.005, 10, 2)])
    orca = rows(simulate(trace, "max", num_gpu_blocks=65, max_model_len=64))
    ft = rows(simulate(trace, "ft", num_gpu_blocks=65, max_model_len=64))
    assert orca[2]["first_scheduled_s"] < orca[0]["finish_s"]
    assert ft[2]["first_scheduled_s"] == pytest.approx(ft[0]["finish_s"])
