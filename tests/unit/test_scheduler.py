"""Hand-checkable scheduler scenarios, each worked out on paper (block size 16, 10 ms steps)."""
from __future__ import annotations

import pytest

from tests.unit.simkit import STEP_S, make_trace, rows, simulate, steps


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


def test_over_length_prompt_rejected_and_output_truncated() -> None:
    """max_model_len 48: a 48-token prompt is rejected; 20 + 100 is cut to 20 + 28."""
    result = simulate(make_trace([(0.0, 48, 4), (0.0, 20, 100)]), max_model_len=48)
    too_long, cut = rows(result)
    assert too_long["status"] == "rejected"
    assert too_long["rejection_reason"] == "prompt_too_long"
    assert cut["status"] == "finished" and cut["output_tokens"] == 28 and cut["truncated"]
    assert result.summary["num_rejected"] == 1
    assert result.counters["num_truncated"] == 1


def test_budget_limits_prefill_chunks() -> None:
    """With a 32-token budget a 100-token prompt is prefilled in 4 chunks (32+32+32+4)."""
    result = simulate(make_trace([(0.0, 100, 2)]), max_num_batched_tokens=32,
                      max_model_len=32 * 4)
    assert steps(result)["prefill_tokens"][:4] == [32, 32, 32, 4]
    assert rows(result)[0]["first_token_s"] == pytest.approx(4 * STEP_S)


