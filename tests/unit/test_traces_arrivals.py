"""Unit tests for traces.arrivals: vLLM's request-rate schedule (gamma gaps of shape
burstiness, rescaled so the last request is at N / rate), replays at a fixed rate, and the
refusal of schedules that overflow or collapse."""
from __future__ import annotations

import math

import numpy as np
import pytest

from traces import TraceError, default_workload, scale_rate
from traces.arrivals import request_arrivals, with_request_rate


def test_last_arrival_is_n_over_rate_and_mean_gap_is_one_over_rate() -> None:
    """The schedule ends at exactly N / rate, as vLLM rescales it."""
    times = request_arrivals(4000, 8.0, 1.0, seed=1)
    assert times[-1] == pytest.approx(4000 / 8.0, rel=1e-12)
    assert np.all(np.diff(times) >= 0) and times[0] > 0
    assert np.diff(times).mean() == pytest.approx(1 / 8.0, rel=0.01)


@pytest.mark.parametrize(("burstiness", "cv"), [(1.0, 1.0), (0.25, 2.0), (4.0, 0.5)])
def test_burstiness_sets_the_gap_spread(burstiness: float, cv: float) -> None:
    """Gamma gaps of shape b have coefficient of variation 1/sqrt(b) (1: Poisson)."""
    gaps = np.diff(request_arrivals(20000, 5.0, burstiness, seed=2))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)


def test_infinite_rate_and_burstiness() -> None:
    """rate inf sends everything at 0; burstiness inf spaces requests exactly 1/rate."""
    assert request_arrivals(5, math.inf).tolist() == [0.0] * 5
    even = request_arrivals(4, 2.0, math.inf)
    assert even.tolist() == pytest.approx([0.5, 1.0, 1.5, 2.0])


def test_seeded_and_independent_of_other_streams() -> None:
    """The same seed gives the same schedule; another seed another one."""
    a, b = request_arrivals(50, 3.0, seed=7), request_arrivals(50, 3.0, seed=7)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, request_arrivals(50, 3.0, seed=8))


def test_replay_keeps_order_and_content() -> None:
    """with_request_rate replaces only the times; requests keep their order and lengths."""
    base = default_workload(seed=0)
    fast = with_request_rate(base, 40.0, 2.0, seed=0)
    assert fast.request_ids.tolist() == base.request_ids.tolist()
    assert np.array_equal(fast.prompt_lens, base.prompt_lens)
    assert fast.arrival_s[-1] == pytest.approx(len(base) / 40.0)
    assert "request rate 40/s, burstiness 2" in fast.metadata.notes[-1]


@pytest.mark.parametrize(("rate", "burstiness", "option", "words"), [
    (1e-300, 1.0, "--request-rate 1e-300", "would span"),
    (1e300, 1.0, "--request-rate 1e+300", "less than 1e-09 s"),
    (0.0, 1.0, "--request-rate 0", "must be > 0"),
    (math.nan, 1.0, "--request-rate nan", "must be > 0"),
    (5.0, 0.0, "--burstiness 0", "must be > 0"),
    (5.0, 1e-300, "--burstiness 1e-300", "underflow"),
])
def test_absurd_schedules_are_refused(rate: float, burstiness: float, option: str,
                                      words: str) -> None:
    """Rates and burstiness giving inf, NaN, 0 or collapsed times name the option."""
    with pytest.raises(TraceError) as info:
        request_arrivals(100, rate, burstiness)
    assert str(info.value).startswith(option) and words in str(info.value)


@pytest.mark.parametrize(("factor", "words"), [
    (1e-300, "would span"), (1e300, "less than 1e-09 s"), (0.0, "positive and finite"),
    (math.inf, "positive and finite"), (math.nan, "positive and finite")])
def test_scale_rate_refuses_absurd_factors(factor: float, words: str) -> None:
    """scale_rate(trace, 1e-300) and friends raise a TraceError naming --rate-scale."""
    with pytest.raises(TraceError) as info:
        scale_rate(default_workload(), factor)
    assert str(info.value).startswith("--rate-scale") and words in str(info.value)
    assert "\n" not in str(info.value)
