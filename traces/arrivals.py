"""Arrival processes like `vllm bench serve`: a fixed request rate, optionally bursty.

vLLM draws one gap per request from Gamma(shape = burstiness, scale = 1 / (rate x
burstiness)), so the mean gap is 1/rate (burstiness 1: Poisson; below 1: burstier; above 1:
more regular), adds the gaps up and rescales the sum so that the last request is sent at
exactly N / rate. A rate of inf sends every request at time 0; a burstiness of inf spaces
them exactly 1/rate apart. `request_arrivals` computes that schedule and `with_request_rate`
puts it on a trace in place of the trace's own times (a replay at a fixed rate). Schedules
that would overflow or collapse are refused, naming the option that caused them.
"""
from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from traces.distributions import gamma_gaps, rng_for
from traces.errors import TraceError
from traces.limits import MAX_SPAN_S, MIN_SPAN_S
from traces.model import Trace

FloatArray = npt.NDArray[np.float64]


def check_rate(request_rate: float, burstiness: float = 1.0) -> None:
    """Refuse a rate or burstiness that is not a positive number (inf is allowed).

    Raises:
        TraceError: naming --request-rate or --burstiness.
    """
    if not request_rate > 0:
        raise TraceError(f"--request-rate {request_rate:g}: must be > 0 requests/s (inf sends "
                         "every request at time 0)")
    if not burstiness > 0:
        raise TraceError(f"--burstiness {burstiness:g}: must be > 0 (1 is Poisson arrivals, "
                         "inf evenly spaced ones)")


def check_span(span_s: float, num_requests: int, option: str, value: float) -> None:
    """Refuse arrivals that overflow, span more than MAX_SPAN_S, or collapse below
    MIN_SPAN_S although they should be spread out.

    Args:
        span_s: time from the first arrival to the last, as computed.
        num_requests: requests in the schedule.
        option: the option that set the schedule (e.g. "--rate-scale"), for the message.
        value: that option's value.

    Raises:
        TraceError: one line naming the option and a range that would work.
    """
    if not math.isfinite(span_s) or span_s > MAX_SPAN_S:
        shown = "beyond float range" if not math.isfinite(span_s) else f"{span_s:.3g} s"
        raise TraceError(f"{option} {value:g}: the {num_requests} arrivals would span "
                         f"{shown}, more than {MAX_SPAN_S:.0e} s (about 32 years); choose a "
                         f"{'larger' if option != '--burstiness' else 'different'} {option}")
    if num_requests > 1 and span_s < MIN_SPAN_S:
        raise TraceError(f"{option} {value:g}: squeezes the {num_requests} arrivals into "
                         f"{span_s:.3g} s, less than {MIN_SPAN_S:.0e} s; use --request-rate "
                         "inf to send every request at time 0")


def request_arrivals(
    num_requests: int, request_rate: float = math.inf, burstiness: float = 1.0, seed: int = 0
) -> FloatArray:
    """Send times of `num_requests` requests as `vllm bench serve` schedules them.

    Args:
        num_requests: how many requests.
        request_rate: requests per second; inf sends all at time 0.
        burstiness: gamma shape of the gaps (1: Poisson); inf gives equal gaps.
        seed: fixes the draws.

    Returns:
        non-decreasing times (s); the last is num_requests / request_rate.

    Raises:
        TraceError: a bad rate or burstiness, or a schedule that overflows or collapses.
    """
    check_rate(request_rate, burstiness)
    if num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    if num_requests == 0 or request_rate == math.inf:
        return np.zeros(num_requests)
    total = num_requests / request_rate
    check_span(total, num_requests, "--request-rate", request_rate)
    if burstiness == math.inf:
        gaps = np.full(num_requests, 1.0 / request_rate)
    else:
        with np.errstate(all="ignore"):
            gaps = gamma_gaps(num_requests, request_rate, burstiness,
                              rng=rng_for(seed, "request-arrivals"))
    times = np.cumsum(gaps)
    if not (math.isfinite(times[-1]) and times[-1] > 0):
        what = "all underflow to 0" if times[-1] == 0 else "overflow"
        raise TraceError(f"--burstiness {burstiness:g}: the gamma gaps {what}; use a "
                         "burstiness nearer 1 (1 is Poisson)")
    times *= total / times[-1]
    check_span(float(times[-1] - times[0]), num_requests, "--burstiness", burstiness)
    return np.asarray(times, dtype=np.float64)


def with_request_rate(
    trace: Trace, request_rate: float, burstiness: float = 1.0, seed: int = 0
) -> Trace:
    """The trace's requests, in their order, sent on `request_arrivals`' schedule instead of
    their own times (vLLM's `--request-rate` replay of a dataset).

    Raises:
        TraceError: as `request_arrivals`.
    """
    times = request_arrivals(len(trace), request_rate, burstiness, seed)
    meta = trace.metadata.with_note(
        f"arrival times replaced: request rate {request_rate:g}/s, burstiness "
        f"{burstiness:g}, seed {seed} (vllm bench serve schedule)")
    return trace.replace(arrival_s=times, metadata=meta)
