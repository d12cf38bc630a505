"""Hand-checkable scheduler scenarios, each worked out on paper (block size 16, 10 ms steps)."""
from __future__ import annotations

import pytest

from tests.unit.simkit import STEP_S, make_trace, rows, simulate, steps
from traces import add_system_prompt


@pytest.mark.parametrize("fast", [True, False])
def test_one_request_timeline(fast: bool) -> None:
    """Prompt 40, output 5: one prefill step then 4 decode steps; 3 blocks at the end."""
    result = simulate(make_trace([(0.0, 40, 5)]), fast=fast)
    (row,) = rows(result)
    assert row["status"] == "finished"
    assert row["first_scheduled_s"] == 0.0
    assert row["first_token_s"] == pytest.approx(STEP_S)
    assert row["finish_s"] == pytest.approx(5 * STEP_S)
    cols = steps(result)
    assert cols["prefill_tokens"] == [40, 0, 0, 0, 0]
    assert cols["decode_tokens"] == [0, 1, 1, 1, 1]
    # After the last step 40 + 4 = 44 tokens sit in 3 blocks; then the request is freed.
    assert cols["token_states"][3] == 43
    assert cols["reserved"][3] == 1 and cols["internal_frag"][3] == 4
    assert result.summary["leaked_blocks"] == 0
    assert result.summary["ttft_mean_s"] == pytest.approx(STEP_S)
    assert result.summary["tpot_mean_s"] == pytest.approx(STEP_S)


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


def test_over_length_prompt_rejected_and_output_truncated() -> None:
    """max_model_len 48: a 48-token prompt is rejected; 20 + 100 is cut to 20 + 28."""
    result = simulate(make_trace([(0.0, 48, 4), (0.0, 20, 100)]), max_model_len=48)
    too_long, cut = rows(result)
    assert too_long["status"] == "rejected"
    assert too_long["rejection_reason"] == "prompt_too_long"
    assert cut["status"] == "finished" and cut["output_tokens"] == 28 and cut["truncated"]
    assert result.summary["num_rejected"] == 1
    assert result.counters["num_truncated"] == 1


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


def test_budget_limits_prefill_chunks() -> None:
    """With a 32-token budget a 100-token prompt is prefilled in 4 chunks (32+32+32+4)."""
    result = simulate(make_trace([(0.0, 100, 2)]), max_num_batched_tokens=32,
                      max_model_len=32 * 4)
    assert steps(result)["prefill_tokens"][:4] == [32, 32, 32, 4]
    assert rows(result)[0]["first_token_s"] == pytest.approx(4 * STEP_S)


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
