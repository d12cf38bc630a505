"""Summary definitions on hand-made records (vLLM benchmark conventions)."""
from __future__ import annotations

import pytest

from sim.results.metrics import SUMMARY_KEYS, RunLog, summarize
from sim.workload.sequence import Group


def _group(i: int, arrival: float, first: float, finish: float, output: int) -> Group:
    g = Group(i, f"r{i}", arrival, 10, output, output, 1, 1, None)
    g.status, g.first_token, g.finish, g.first_scheduled = "finished", first, finish, arrival
    return g


def _log() -> RunLog:
    log = RunLog(3)
    log.add_group(_group(0, 0.0, 0.5, 2.5, 5))
    log.add_group(_group(1, 1.0, 1.2, 1.2, 1))
    rejected = Group(2, "r2", 1.5, 99, 1, 1, 1, 1, 7)
    rejected.status, rejected.reject_reason = "rejected", "prompt_too_long"
    log.add_group(rejected)
    # two steps: 1 s with 2 running and token_states 50, 3 s with 1 running and 10
    row = [0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 2, 2, 0, 0, 2, 10, 1,
           50, 10, 0, 20, 0, 20, 50, 10, 4, 0, 0, 0, 0]
    log.steps.append(tuple(row))
    row2 = list(row)
    row2[0], row2[1], row2[2], row2[8], row2[14], row2[15], row2[19] = 1, 1.0, 3.0, 1, 10, 50, 20
    log.steps.append(tuple(row2))
    return log


def test_summary_keys_and_latency_definitions() -> None:
    """Exactly the issue's keys; TTFT, TPOT, e2e and normalised latency as defined."""
    s = summarize(_log(), 100, caching=True, leaked_blocks=0, num_cow_copies=0, wall_s=0.1)
    assert tuple(s) == SUMMARY_KEYS
    assert s["num_finished"] == 2 and s["num_rejected"] == 1
    assert s["duration_s"] == 2.5
    assert s["throughput_tok_s"] == pytest.approx(6 / 2.5)
    assert s["ttft_mean_s"] == pytest.approx((0.5 + 0.2) / 2)
    assert s["tpot_mean_s"] == pytest.approx(2.0 / 4)      # output 1 excluded
    assert s["e2el_mean_s"] == pytest.approx((2.5 + 0.2) / 2)
    assert s["norm_latency_mean_s"] == pytest.approx((2.5 / 5 + 0.2 / 1) / 2)


def test_memory_fractions_are_duration_weighted() -> None:
    """kv_*_frac weight each step by its duration; batch size likewise; hit rate = hits/queries."""
    s = summarize(_log(), 100, caching=True, leaked_blocks=0, num_cow_copies=0, wall_s=0.1)
    assert s["kv_token_states_frac"] == pytest.approx((1 * 50 + 3 * 10) / 4 / 100)
    assert s["kv_reserved_frac"] == pytest.approx((1 * 10 + 3 * 50) / 4 / 100)
    assert s["mean_batch_size"] == pytest.approx((1 * 2 + 3 * 1) / 4)
    assert s["prefix_hit_rate"] == pytest.approx(8 / 20)
    off = summarize(_log(), 100, caching=False, leaked_blocks=0, num_cow_copies=0, wall_s=0.1)
    assert off["prefix_hit_rate"] is None


def test_request_rows_in_trace_order() -> None:
    """Rows follow the trace index and carry the rejection reason and line."""
    cols = _log().request_columns()
    assert cols["index"] == [0, 1, 2]
    assert cols["rejection_reason"] == [None, None, "prompt_too_long"]
    assert cols["trace_line"][2] == 7
