"""Unit tests for traces.synthetic and traces.distributions: seeded generators and their
statistics."""
from __future__ import annotations

import numpy as np
import pytest

from traces import default_workload, synthetic
from traces.distributions import (
    fixed,
    gamma_arrivals,
    lognormal,
    poisson_arrivals,
    resampled,
    rng_for,
    uniform,
)


def test_generators_are_deterministic() -> None:
    """The same seed gives identical traces; another seed gives a different one."""
    a, b = synthetic.sharegpt_like(500, seed=7), synthetic.sharegpt_like(500, seed=7)
    c = synthetic.sharegpt_like(500, seed=8)
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.prompt_lens, b.prompt_lens)
    assert np.array_equal(a.prompt_token_ids(3), b.prompt_token_ids(3))
    assert not np.array_equal(a.prompt_lens, c.prompt_lens)


def test_poisson_rate_and_cv() -> None:
    """Poisson arrivals have the requested rate and gap CV close to 1."""
    t = poisson_arrivals(200_000, 4.0, rng=rng_for(1, "t"))
    gaps = np.diff(t)
    assert t[0] == 0.0
    assert (len(t) - 1) / t[-1] == pytest.approx(4.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_arrivals_match_rate_and_cv(cv: float) -> None:
    """Gamma arrivals keep the mean rate while the gap CV follows the request."""
    t = gamma_arrivals(200_000, 10.0, cv, rng=rng_for(2, "g"))
    gaps = np.diff(t)
    assert 1 / gaps.mean() == pytest.approx(10.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_length_distributions() -> None:
    """Fixed, uniform, lognormal and resampled lengths have the right support and mean."""
    rng = rng_for(3, "len")
    assert set(fixed(42).sample(100, rng).tolist()) == {42}
    u = uniform(10, 20).sample(100_000, rng)
    assert u.min() == 10 and u.max() == 20 and u.mean() == pytest.approx(15, rel=0.01)
    ln = lognormal(300, sigma=0.8).sample(200_000, rng)
    assert ln.min() >= 1 and ln.mean() == pytest.approx(300, rel=0.02)
    r = resampled([5, 7]).sample(10_000, rng)
    assert set(r.tolist()) == {5, 7}
    with pytest.raises(ValueError):
        uniform(5, 2)


def test_presets_match_published_means() -> None:
    """ShareGPT-like and Alpaca-like presets reproduce the paper's mean lengths."""
    sg = synthetic.sharegpt_like(100_000, rate=50.0, seed=0)
    al = synthetic.alpaca_like(100_000, rate=50.0, seed=0)
    assert sg.prompt_lens.mean() == pytest.approx(161, rel=0.03)
    assert sg.output_lens.mean() == pytest.approx(338, rel=0.03)
    assert al.prompt_lens.mean() == pytest.approx(19, rel=0.03)
    assert al.output_lens.mean() == pytest.approx(58, rel=0.03)
    assert (len(sg) - 1) / sg.metadata.span_s == pytest.approx(50.0, rel=0.03)


def test_resampling_from_a_trace_keeps_its_distribution() -> None:
    """Lengths resampled from another trace keep that trace's mean."""
    src = synthetic.sharegpt_like(2000, seed=4)
    t = synthetic.synthetic(50_000, 5.0, resampled(src.prompt_lens), fixed(10), seed=5)
    assert t.prompt_lens.mean() == pytest.approx(src.prompt_lens.mean(), rel=0.05)
    assert set(np.unique(t.prompt_lens)) <= set(np.unique(src.prompt_lens))


def test_shared_prefix_workload_shares_leading_tokens() -> None:
    """Requests given the same system prompt start with the same tokens."""
    t = synthetic.shared_prefix(200, prefix_len=64, num_prefixes=1, fraction=1.0, seed=2)
    first = [t.prompt_token_ids(i)[:64] for i in range(5)]
    assert all(np.array_equal(first[0], f) for f in first)
    assert np.all(t.prefix_lens == 64)


def test_multi_turn_chat_workload_has_sessions() -> None:
    """The multi-turn generator produces sessions whose later turns extend earlier ones."""
    t = synthetic.multi_turn_chat(40, turns=4, seed=1)
    assert t.session_ids is not None and len(np.unique(t.session_ids)) == 10
    assert t.turns is not None and set(t.turns.tolist()) == {0, 1, 2, 3}


def test_default_workload_is_modest_and_structured() -> None:
    """The default workload is a minute or two of ShareGPT-like traffic with shared prompts."""
    t = default_workload()
    assert 300 <= len(t) <= 1000
    assert 60 <= t.metadata.span_s <= 600
    assert 0.3 < np.mean(t.prefix_lens > 0) < 0.7
    assert t.has_prefix_structure and t.metadata.format == "default"
    assert np.array_equal(t.prompt_lens, default_workload().prompt_lens)
