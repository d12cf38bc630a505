"""Property tests for traces: token derivation, hash-block expansion, prefixes and
transformations hold their invariants for arbitrary inputs."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traces import (
    Trace,
    add_system_prompt,
    clip_lengths,
    derive_token_ids,
    multi_turn,
    time_window,
)
from traces.tokens import expand_hash_blocks

SETTINGS = settings(max_examples=40, deadline=None)


@SETTINGS
@given(seed=st.integers(0, 2**32), rid=st.text(alphabet="abcxyz-_:0123456789", min_size=1, max_size=12),
       start=st.integers(0, 10_000), count=st.integers(0, 300), cut=st.integers(0, 300),
       vocab=st.integers(1, 70_000))
def test_derivation_is_position_addressable(seed: int, rid: str, start: int, count: int,
                                            cut: int, vocab: int) -> None:
    """Any slice of a derived run equals deriving that slice directly; ids are in range."""
    whole = derive_token_ids(seed, rid, start, count, vocab)
    k = min(cut, count)
    assert np.array_equal(whole[k:], derive_token_ids(seed, rid, start + k, count - k, vocab))
    assert len(whole) == count and (count == 0 or (whole.min() >= 0 and whole.max() < vocab))


@SETTINGS
@given(ids_a=st.lists(st.integers(0, 50), min_size=1, max_size=8),
       ids_b=st.lists(st.integers(0, 50), min_size=1, max_size=8),
       block=st.sampled_from([16, 32, 512]))
def test_hash_blocks_share_exactly_the_common_id_prefix(
        ids_a: list[int], ids_b: list[int], block: int) -> None:
    """Two expansions agree on exactly the blocks of their common leading hash ids."""
    a = expand_hash_blocks(1, np.array(ids_a), len(ids_a) * block, block)
    b = expand_hash_blocks(1, np.array(ids_b), len(ids_b) * block, block)
    common = 0
    while common < min(len(ids_a), len(ids_b)) and ids_a[common] == ids_b[common]:
        common += 1
    n = common * block
    assert np.array_equal(a[:n], b[:n])
    if common < min(len(ids_a), len(ids_b)):
        assert not np.array_equal(a[n:n + block], b[n:n + block])


lengths = st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=12)


def _trace(rows: list[tuple[int, int]]) -> Trace:
    return Trace(np.arange(len(rows), dtype=float), [p for p, _ in rows],
                 [o for _, o in rows], seed=5)


@SETTINGS
@given(rows=lengths, turns=st.integers(1, 4), sys_len=st.integers(1, 20),
       frac=st.floats(0, 1))
def test_turns_extend_previous_conversation(rows: list[tuple[int, int]], turns: int,
                                            sys_len: int, frac: float) -> None:
    """After multi_turn (and a system prompt), each turn starts with the previous turn's
    prompt and output, and prompt lengths match their token ids."""
    t = add_system_prompt(multi_turn(_trace(rows), turns, 1.0, seed=1), sys_len, frac)
    assert t.session_ids is not None and t.turns is not None
    for i in range(len(t)):
        assert len(t.prompt_token_ids(i)) == t.prompt_lens[i]
        if t.turns[i] == 0:
            continue
        prev = int(np.flatnonzero((t.session_ids == t.session_ids[i])
                                  & (t.turns == t.turns[i] - 1))[0])
        history = np.concatenate([t.prompt_token_ids(prev), t.output_token_ids(prev)])
        assert np.array_equal(t.prompt_token_ids(i)[: len(history)], history)


@SETTINGS
@given(rows=lengths, max_len=st.integers(2, 80))
def test_clip_fits_or_keeps(rows: list[tuple[int, int]], max_len: int) -> None:
    """Clipped requests fit max_model_len unless their prompt alone cannot; counts agree."""
    src = _trace(rows)
    t = clip_lengths(src, max_len)
    fits = src.prompt_lens < max_len
    assert np.all((t.prompt_lens + t.output_lens)[fits] <= max_len)
    assert np.array_equal(t.output_lens[~fits], src.output_lens[~fits])
    assert t.metadata.num_truncated == int(np.sum(t.output_lens < src.output_lens))


@SETTINGS
@given(rows=lengths, start=st.floats(0, 12), width=st.floats(0, 12))
def test_window_keeps_exactly_the_interval(rows: list[tuple[int, int]], start: float,
                                           width: float) -> None:
    """A time window keeps exactly the requests arriving inside it, rebased to its start."""
    src = _trace(rows)
    t = time_window(src, start, start + width)
    inside = (src.arrival_s >= start) & (src.arrival_s < start + width)
    assert len(t) == int(inside.sum())
    assert np.allclose(t.arrival_s, src.arrival_s[inside] - start)


@SETTINGS
@given(seed=st.integers(0, 2**32), lengths=st.lists(st.integers(0, 200), max_size=12),
       vocab=st.integers(1, 70_000))
def test_derive_token_runs_equals_one_call_per_run(seed: int, lengths: list[int],
                                                   vocab: int) -> None:
    """The vectorised form gives each run exactly derive_token_ids(seed, key, 0, length)."""
    from traces.tokens import derive_token_runs

    keys = [f"r{i}" for i in range(len(lengths))]
    tokens, offsets = derive_token_runs(seed, keys, lengths, vocab)
    assert offsets[-1] == len(tokens) == sum(lengths)
    for key, length, start in zip(keys, lengths, offsets):
        run = tokens[start:start + length]
        assert np.array_equal(run, derive_token_ids(seed, key, 0, length, vocab))
