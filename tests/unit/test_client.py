"""sim/client.py: --max-concurrency sends a request when it arrives or when a slot frees,
whichever is later, and its latencies count from the send."""
from __future__ import annotations

import itertools

from tests.unit.simkit import STEP_S, make_trace, rows, simulate


def _in_flight_peak(result_rows: list[dict[str, object]]) -> int:
    events = sorted([(r["arrival_s"], 1) for r in result_rows]
                    + [(r["finish_s"], -1) for r in result_rows],
                    key=lambda e: (e[0], e[1]))
    peak = now = 0
    for _, delta in events:
        now += delta
        peak = max(peak, now)
    return peak


def test_one_slot_sends_each_request_when_the_last_finishes() -> None:
    """Four requests at time 0 through one slot: each is sent at the previous finish and
    takes the same time from its send (1 prefill step + 4 decode steps)."""
    trace = make_trace([(0.0, 16, 5)] * 4)
    out = rows(simulate(trace, max_concurrency=1))
    for prev, cur in itertools.pairwise(out):
        assert cur["arrival_s"] == prev["finish_s"]
    for r in out:
        assert abs(r["first_token_s"] - r["arrival_s"] - STEP_S) < 1e-12
        assert abs(r["finish_s"] - r["arrival_s"] - 5 * STEP_S) < 1e-12


def test_no_limit_and_a_large_limit_agree() -> None:
    """A limit above the number of requests changes nothing (and none is not a limit)."""
    trace = make_trace([(0.003 * i, 40 + i, 6 + i % 5) for i in range(20)])
    free = rows(simulate(trace))
    wide = rows(simulate(trace, max_concurrency=50))
    assert free == wide


def test_limit_caps_requests_in_flight_and_delays_sends() -> None:
    """With 3 slots at most 3 requests are in flight; later ones are sent after their
    trace arrival (so TTFT from the send is shorter than from the trace time would be)."""
    times = [0.002 * i for i in range(30)]
    trace = make_trace([(t, 60, 12) for t in times])
    out = rows(simulate(trace, max_concurrency=3, fast=True))
    ref = rows(simulate(trace, max_concurrency=3, fast=False))
    assert out == ref
    assert _in_flight_peak(out) == 3
    assert _in_flight_peak(rows(simulate(trace))) > 3
    assert sum(r["arrival_s"] > t for r, t in zip(out, times)) > 20
    assert all(r["arrival_s"] >= t for r, t in zip(out, times))


def test_a_rejected_request_frees_its_slot() -> None:
    """A prompt longer than max_model_len is rejected on arrival; its slot goes at once to
    the next request."""
    trace = make_trace([(0.0, 5000, 5), (0.0, 16, 5), (0.0, 16, 5)])
    out = rows(simulate(trace, max_concurrency=1))
    assert out[0]["status"] == "rejected"
    assert out[1]["arrival_s"] == 0.0 and out[2]["arrival_s"] == out[1]["finish_s"]
