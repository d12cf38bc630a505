"""Transformations that turn one trace into another (the input is never changed).

Time window and request limit, rate scaling, re-timing with Poisson/Gamma arrivals,
output clipping to a maximum model length, and per-request n / beam width. Each step is
recorded in the result's metadata notes, and every count of changed requests is kept,
so nothing is altered silently.
"""
from __future__ import annotations

import math

import numpy as np

from traces.arrivals import check_span
from traces.distributions import gamma_arrivals, rng_for
from traces.errors import TraceError
from traces.model import Trace


def time_window(trace: Trace, start_s: float = 0.0, end_s: float = math.inf) -> Trace:
    """Requests arriving in [start_s, end_s), with times rebased so start_s becomes 0."""
    if not start_s <= end_s or start_s < 0:
        raise ValueError(f"bad time window [{start_s}, {end_s})")
    keep = np.flatnonzero((trace.arrival_s >= start_s) & (trace.arrival_s < end_s))
    meta = trace.metadata.with_note(f"time window [{start_s}, {end_s}) s: kept {len(keep)}")
    return trace.take(keep, arrival_s=trace.arrival_s[keep] - start_s, metadata=meta)


def limit(trace: Trace, max_requests: int) -> Trace:
    """The first `max_requests` requests."""
    if max_requests < 0:
        raise ValueError(f"max_requests must be >= 0, got {max_requests}")
    if max_requests >= len(trace):
        return trace
    meta = trace.metadata.with_note(f"limited to first {max_requests} requests")
    return trace.take(np.arange(max_requests), metadata=meta)


def scale_rate(trace: Trace, factor: float, *, option: str = "--rate-scale") -> Trace:
    """Replay at `factor` times the recorded rate (gaps divided by factor).

    Raises:
        TraceError: factor not positive and finite, or arrivals that would overflow, span
            more than limits.MAX_SPAN_S or collapse below limits.MIN_SPAN_S; the message
            names `option` (the command-line option that gave the factor).
    """
    if not 0 < factor < math.inf:
        raise TraceError(f"{option} {factor:g}: must be positive and finite (1 replays the "
                         "trace's own times)")
    with np.errstate(over="ignore", under="ignore"):
        arrivals = trace.arrival_s / factor
    if len(trace) > 1 and trace.metadata.span_s > 0:
        check_span(float(arrivals[-1] - arrivals[0]), len(trace), option, factor)
    meta = trace.metadata.with_note(f"rate scaled x{factor:g}")
    return trace.replace(arrival_s=arrivals, metadata=meta)


def retime(trace: Trace, rate: float, cv: float = 1.0, seed: int = 0) -> Trace:
    """Replace arrival times with a Gamma renewal process (cv = 1: Poisson), same order."""
    arrivals = gamma_arrivals(len(trace), rate, cv, rng=rng_for(seed, "retime"))
    meta = trace.metadata.with_note(f"re-timed: rate {rate:g}/s, cv {cv:g}, seed {seed}")
    return trace.replace(arrival_s=arrivals, metadata=meta)


def clip_lengths(trace: Trace, max_model_len: int) -> Trace:
    """Truncate outputs so prompt + output <= max_model_len; count what changed.

    Prompts that cannot fit with even one output token (prompt_len >= max_model_len)
    are kept unchanged: the simulator rejects and counts them.
    """
    if max_model_len < 2:
        raise ValueError(f"max_model_len must be >= 2, got {max_model_len}")
    prompt, output = trace.prompt_lens, trace.output_lens
    fits = prompt < max_model_len
    new_out = np.where(fits, np.minimum(output, max_model_len - prompt), output)
    num_cut = int(np.count_nonzero(new_out < output))
    num_long = int(np.count_nonzero(~fits))
    meta = trace.metadata.with_note(
        f"clipped to max_model_len {max_model_len}: {num_cut} outputs truncated, "
        f"{num_long} prompts too long (kept for the simulator to reject)",
        num_truncated=trace.metadata.num_truncated + num_cut)
    return trace.replace(output_lens=new_out, metadata=meta)


def set_sampling(
    trace: Trace, n: int = 1, beam_width: int = 1, fraction: float = 1.0, seed: int = 0
) -> Trace:
    """Give a random `fraction` of requests sampling `n` and `beam_width`; others keep theirs.

    Under beam search (beam_width > 1) n must not exceed beam_width.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    picked = rng_for(seed, "sampling").random(len(trace)) < fraction
    new_n = np.where(picked, n, trace.n)
    new_bw = np.where(picked, beam_width, trace.beam_width)
    meta = trace.metadata.with_note(
        f"n={n}, beam_width={beam_width} on {int(picked.sum())} requests")
    return trace.replace(n=new_n, beam_width=new_bw, metadata=meta)
