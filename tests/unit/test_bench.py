"""sim/results/bench.py: vllm bench serve's metrics (names, ms, TPOT without the first
token, ITL per gap, goodput) from request rows and step ends."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from sim.config import OptionError, Options
from sim.results.bench import (
    bench_metrics,
    parse_goodput,
    parse_percentiles,
    percentile_word,
    token_gaps,
)

OPTIONS = Options()


def _requests(rows: list[tuple[str, float, float | None, float | None, int, int]]
              ) -> dict[str, list[Any]]:
    keys = ("status", "arrival_s", "first_token_s", "finish_s", "prompt_tokens",
            "output_tokens")
    return {k: [r[i] for r in rows] for i, k in enumerate(keys)}


def test_gaps_are_the_step_ends_a_request_decoded_in() -> None:
    """Steps end at 1, 2, 4, 7: a request with its first token at 1 and 3 tokens finishing
    at 4 has gaps 1 and 2 (exact); one with 3 tokens from 1 to 7 sat out a step, so its two
    gaps are estimated as equal (3 and 3)."""
    ends = np.array([1.0, 2.0, 4.0, 7.0])
    gaps, estimated = token_gaps(np.array([1.0, 1.0]), np.array([4.0, 7.0]),
                                 np.array([3, 3]), ends)
    assert gaps.tolist() == [1.0, 2.0, 3.0, 3.0] and estimated == 1


def test_metrics_follow_vllm_definitions() -> None:
    """Two finished requests and one rejected: TTFT, TPOT (excluding the first token),
    E2EL, ITL pooled over gaps, throughputs over last finish - first arrival."""
    req = _requests([("finished", 0.0, 0.5, 2.5, 100, 5),   # gaps 0.5 x 4
                     ("finished", 1.0, 1.5, 1.5, 50, 1),    # one token: no TPOT, no gap
                     ("rejected", 2.0, None, None, 9999, 0)])
    ends = np.array([0.5, 1.0, 1.5, 2.0, 2.5])
    m = bench_metrics(req, ends, replace(OPTIONS, metric_percentiles="50,99.9"))
    assert m["completed"] == 2 and m["duration"] == 2.5
    assert m["request_throughput"] == pytest.approx(2 / 2.5)
    assert m["output_throughput"] == pytest.approx(6 / 2.5)
    assert m["total_token_throughput"] == pytest.approx(156 / 2.5)
    assert m["mean_ttft_ms"] == pytest.approx(500.0) and m["std_ttft_ms"] == 0.0
    assert m["mean_tpot_ms"] == pytest.approx(500.0)   # (2.5 - 0.5) / 4, request 2 left out
    assert m["mean_e2el_ms"] == pytest.approx((2500 + 500) / 2)
    assert m["mean_itl_ms"] == pytest.approx(500.0) and m["itl_estimated_requests"] == 0
    assert m["p50_e2el_ms"] == pytest.approx(1500.0)
    assert "p99.9_ttft_ms" in m and "p99_ttft_ms" not in m
    assert m["request_goodput"] is None


def test_goodput_counts_requests_meeting_every_slo() -> None:
    """ttft:600 e2el:1000 keeps only the second request (TPOT 0 for one token)."""
    req = _requests([("finished", 0.0, 0.5, 2.5, 10, 5), ("finished", 1.0, 1.5, 1.5, 10, 1)])
    opts = replace(OPTIONS, goodput=("ttft:600", "e2el:1000", "tpot:0"))
    m = bench_metrics(req, np.array([0.5, 1.0, 1.5, 2.0, 2.5]), opts)
    assert m["request_goodput"] == pytest.approx(1 / 2.5)


def test_selected_metrics_only_and_empty_runs() -> None:
    """--percentile-metrics picks the metric families; a run with nothing finished has
    None for every latency."""
    req = _requests([("rejected", 0.0, None, None, 10, 0)])
    m = bench_metrics(req, np.zeros(0), replace(OPTIONS, percentile_metrics="ttft"))
    assert m["completed"] == 0 and m["mean_ttft_ms"] is None and m["request_throughput"] is None
    assert not any(k.endswith(("_tpot_ms", "_itl_ms")) for k in m)


def test_parsers() -> None:
    """Keys spell percentiles as vLLM does; bad values are refused naming the option."""
    assert [percentile_word(p) for p in parse_percentiles("50,90,99.9")] == ["50", "90", "99.9"]
    assert parse_goodput(("ttft:500", "tpot:50.5")) == {"ttft": 500.0, "tpot": 50.5}
    for bad in (("ttft:500", "ttft:1"), ("itl:5",), ("ttft:-1",)):
        with pytest.raises(OptionError, match="--goodput"):
            parse_goodput(bad)
    with pytest.raises(OptionError, match="--metric-percentiles"):
        parse_percentiles("a,b")
