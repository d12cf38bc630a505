"""Unit tests for traces.transforms and traces.prefixes: each transformation returns a
new trace and records what it changed."""
from __future__ import annotations

import numpy as np
import pytest

from traces import (
    Trace,
    add_system_prompt,
    clip_lengths,
    limit,
    multi_turn,
    retime,
    scale_rate,
    set_sampling,
    time_window,
)


def _trace(size: int = 10) -> Trace:
    return Trace(np.arange(size, dtype=float), np.arange(1, size + 1) * 10,
                 np.full(size, 50), seed=3)


def test_time_window_keeps_half_open_interval_and_rebases() -> None:
    """Requests in [start, end) are kept and shifted so start becomes time 0."""
    t = time_window(_trace(), 2.0, 5.0)
    assert list(t.arrival_s) == [0.0, 1.0, 2.0]
    assert list(t.request_ids) == ["2", "3", "4"]
    assert "time window" in t.metadata.notes[-1]


def test_limit_keeps_first_requests() -> None:
    """limit() keeps the first N requests."""
    assert list(limit(_trace(), 3).request_ids) == ["0", "1", "2"]
    assert len(limit(_trace(), 99)) == 10


def test_scale_rate_divides_gaps() -> None:
    """Replaying at 4x divides every arrival time by 4, leaving the input unchanged."""
    src = _trace()
    t = scale_rate(src, 4.0)
    assert np.allclose(t.arrival_s, src.arrival_s / 4) and src.arrival_s[1] == 1.0
    with pytest.raises(ValueError):
        scale_rate(src, 0.0)


def test_retime_gives_requested_rate_and_keeps_order() -> None:
    """Re-timing replaces arrivals with a process at the given rate, keeping lengths."""
    src = Trace(np.zeros(50_000), np.full(50_000, 5), np.full(50_000, 5))
    t = retime(src, 20.0, cv=2.0, seed=1)
    gaps = np.diff(t.arrival_s)
    assert 1 / gaps.mean() == pytest.approx(20.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)
    assert np.array_equal(t.prompt_lens, src.prompt_lens)


def test_clip_lengths_truncates_outputs_and_keeps_long_prompts() -> None:
    """Outputs are cut so prompt + output fit; over-long prompts stay for the simulator."""
    src = Trace([0.0, 1.0, 2.0, 3.0], [10, 90, 100, 150], [5, 50, 5, 5])
    t = clip_lengths(src, 100)
    assert list(t.output_lens) == [5, 10, 5, 5]
    assert list(t.prompt_lens) == [10, 90, 100, 150]
    assert t.metadata.num_truncated == 1
    assert "1 outputs truncated, 2 prompts too long" in t.metadata.notes[-1]


def test_set_sampling_applies_to_a_fraction() -> None:
    """n and beam width are set on about the requested fraction of requests."""
    src = Trace(np.zeros(10_000), np.full(10_000, 5), np.full(10_000, 5))
    t = set_sampling(src, n=4, beam_width=4, fraction=0.25, seed=0)
    share = np.mean(t.beam_width == 4)
    assert share == pytest.approx(0.25, abs=0.02) and np.all((t.n == 4) == (t.beam_width == 4))
    with pytest.raises(ValueError):
        set_sampling(src, n=5, beam_width=2)


def test_system_prompt_prefixes_a_fraction_of_requests() -> None:
    """A shared system prompt lengthens the chosen prompts and is identical across them."""
    src = Trace(np.zeros(2000), np.full(2000, 30), np.full(2000, 5), seed=1)
    t = add_system_prompt(src, 40, fraction=0.5, num_prompts=1, seed=2)
    chosen = np.flatnonzero(t.prefix_lens == 40)
    assert len(chosen) / 2000 == pytest.approx(0.5, abs=0.05)
    assert np.all(t.prompt_lens[chosen] == 70) and np.all(src.prompt_lens == 30)
    heads = [t.prompt_token_ids(int(i))[:40] for i in chosen[:10]]
    assert all(np.array_equal(heads[0], h) for h in heads)
    plain = int(np.flatnonzero(t.prefix_lens == 0)[0])
    assert np.array_equal(t.prompt_token_ids(plain), src.prompt_token_ids(plain))


def test_multi_turn_prompts_extend_previous_turn() -> None:
    """Each turn's prompt starts with the previous turn's prompt and output tokens."""
    t = multi_turn(_trace(9), turns=3, think_time_s=5.0, seed=0)
    assert t.session_ids is not None and t.turns is not None
    for i in range(len(t)):
        if t.turns[i] == 0:
            continue
        prev = int(np.flatnonzero((t.session_ids == t.session_ids[i])
                                  & (t.turns == t.turns[i] - 1))[0])
        history = np.concatenate([t.prompt_token_ids(prev), t.output_token_ids(prev)])
        assert t.arrival_s[i] >= t.arrival_s[prev]
        assert np.array_equal(t.prompt_token_ids(i)[: len(history)], history)
        assert t.prompt_lens[i] > len(history)


def test_system_prompt_after_multi_turn_keeps_history_consistent() -> None:
    """Adding a system prompt to sessions keeps each turn a prefix extension of the last."""
    t = add_system_prompt(multi_turn(_trace(8), turns=4, seed=1), 16, fraction=1.0, seed=3)
    assert t.session_ids is not None and t.turns is not None
    for i in np.flatnonzero(t.turns > 0):
        prev = int(np.flatnonzero((t.session_ids == t.session_ids[i])
                                  & (t.turns == t.turns[i] - 1))[0])
        history = np.concatenate([t.prompt_token_ids(prev), t.output_token_ids(prev)])
        assert np.array_equal(t.prompt_token_ids(int(i))[: len(history)], history)


def test_multi_turn_rejects_trace_with_sessions() -> None:
    """Sessions cannot be formed twice."""
    with pytest.raises(ValueError, match="already has sessions"):
        multi_turn(multi_turn(_trace(), 2), 2)


def test_transforms_survive_subsetting() -> None:
    """A window over a multi-turn trace still yields consistent token ids."""
    full = multi_turn(_trace(12), turns=3, think_time_s=1.0, seed=2)
    part = time_window(full, 3.0)
    for i in range(len(part)):
        j = int(np.flatnonzero(full.request_ids == part.request_ids[i])[0])
        assert np.array_equal(part.prompt_token_ids(i), full.prompt_token_ids(j))
