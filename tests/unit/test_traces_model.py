"""Unit tests for traces.model and traces.tokens: the request record, the columnar trace
and deterministic token ids."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from traces import Trace, TraceMetadata, TraceRequest, derive_token_ids
from traces.tokens import expand_hash_blocks


def _small() -> Trace:
    return Trace([0.0, 0.5, 2.0], [10, 20, 30], [1, 2, 3], request_ids=["a", "b", "c"],
                 lines=[2, 3, 4], metadata=TraceMetadata(format="test"))


def test_request_is_frozen_and_validated() -> None:
    """TraceRequest rejects bad values with ValueError and cannot be mutated."""
    req = TraceRequest("r", 0.0, 5, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.prompt_len = 3  # type: ignore[misc]
    for kwargs in ({"prompt_len": 0}, {"output_len": -1}, {"n": 0}, {"beam_width": 0},
                   {"arrival_s": float("nan")}, {"arrival_s": -1.0}, {"request_id": ""},
                   {"n": 4, "beam_width": 2}, {"turn": -2}):
        args = {"request_id": "r", "arrival_s": 0.0, "prompt_len": 5, "output_len": 5}
        args.update(kwargs)
        with pytest.raises(ValueError):
            TraceRequest(**args)  # type: ignore[arg-type]


def test_trace_iterates_and_indexes_requests() -> None:
    """Iteration and indexing yield TraceRequests built from the columns."""
    t = _small()
    reqs = list(t)
    assert len(t) == 3 and reqs[1] == TraceRequest("b", 0.5, 20, 2, line=3)
    assert t[-1].request_id == "c" and t.request_id(0) == "a"
    assert list(t.request_ids) == ["a", "b", "c"]
    with pytest.raises(IndexError):
        t[3]


def test_trace_metadata_counts_are_recomputed() -> None:
    """Trace sets num_requests and span_s from its data, whatever metadata it was given."""
    t = Trace([1.0, 4.0], [1, 1], [1, 1], metadata=TraceMetadata(num_requests=99, span_s=7))
    assert t.metadata.num_requests == 2 and t.metadata.span_s == pytest.approx(3.0)


def test_trace_columns_are_read_only() -> None:
    """Column arrays cannot be written, so a Trace is effectively immutable."""
    t = _small()
    with pytest.raises(ValueError):
        t.prompt_lens[0] = 7


@pytest.mark.parametrize("kwargs, message", [
    ({"arrival_s": [0.0, 2.0, 1.0]}, "non-decreasing"),
    ({"prompt_lens": [1, 0, 1]}, "prompt_len"),
    ({"output_lens": [1, 1, -3]}, "output_len"),
    ({"request_ids": ["x", "y", "x"]}, "duplicate request_id x"),
    ({"n": [1, 3, 1], "beam_width": [1, 2, 1]}, "beam_width"),
])
def test_trace_rejects_invalid_columns(kwargs: dict[str, object], message: str) -> None:
    """The Trace constructor names the first request breaking a rule."""
    cols: dict[str, object] = {"arrival_s": [0.0, 1.0, 2.0], "prompt_lens": [1, 1, 1],
                               "output_lens": [1, 1, 1]}
    cols.update(kwargs)
    with pytest.raises(ValueError, match=message):
        Trace(**cols)  # type: ignore[arg-type]


def test_take_and_replace_return_new_traces() -> None:
    """take() selects requests and replace() swaps columns, leaving the source unchanged."""
    t = _small()
    with pytest.raises(ValueError, match="non-decreasing"):
        t.take([2, 0])
    sub = t.take([0, 2])
    assert list(sub.request_ids) == ["a", "c"] and list(sub.lines) == [2, 4]  # type: ignore[arg-type]
    rep = t.replace(output_lens=[5, 5, 5])
    assert list(rep.output_lens) == [5, 5, 5] and list(t.output_lens) == [1, 2, 3]


def test_from_requests_round_trips() -> None:
    """A trace rebuilt from its own requests yields the same requests."""
    t = _small()
    again = Trace.from_requests(t)
    assert list(again) == list(t)


def test_derive_token_ids_is_deterministic_and_in_range() -> None:
    """Same (seed, id, position) gives the same id; ids lie in [0, vocab)."""
    a = derive_token_ids(3, "req-1", 0, 1000, vocab_size=500)
    assert a.dtype == np.int32 and a.min() >= 0 and a.max() < 500
    assert np.array_equal(a, derive_token_ids(3, "req-1", 0, 1000, vocab_size=500))
    assert np.array_equal(a[400:], derive_token_ids(3, "req-1", 400, 600, vocab_size=500))
    assert not np.array_equal(a, derive_token_ids(4, "req-1", 0, 1000, vocab_size=500))
    assert not np.array_equal(a, derive_token_ids(3, "req-2", 0, 1000, vocab_size=500))
    with pytest.raises(ValueError):
        derive_token_ids(0, "r", -1, 3)


def test_derived_tokens_look_uniform() -> None:
    """Derived ids spread evenly over the vocabulary (no obvious bias)."""
    ids = derive_token_ids(0, "u", 0, 200_000, vocab_size=100)
    counts = np.bincount(ids, minlength=100)
    assert counts.min() > 1700 and counts.max() < 2300


def test_prompt_and_output_token_ids_follow_the_contract() -> None:
    """Without source ids, prompt ids are derived from (seed, id, position) and outputs
    continue at positions prompt_len onwards; sample k > 0 uses its own key."""
    t = Trace([0.0], [7], [4], request_ids=["q"], seed=11)
    assert not t.has_token_ids
    assert np.array_equal(t.prompt_token_ids(0), derive_token_ids(11, "q", 0, 7))
    assert np.array_equal(t.output_token_ids(0), derive_token_ids(11, "q", 7, 4))
    assert np.array_equal(t.output_token_ids(0, sample=2), derive_token_ids(11, "q/2", 7, 4))


def test_hash_blocks_give_identical_runs_for_equal_ids() -> None:
    """Equal hash ids expand to equal token runs; the last block may be partial."""
    a = expand_hash_blocks(0, np.array([5, 6, 7]), 2 * 8 + 3, 8)
    b = expand_hash_blocks(0, np.array([5, 6, 9]), 3 * 8, 8)
    assert len(a) == 19 and len(b) == 24
    assert np.array_equal(a[:16], b[:16]) and not np.array_equal(a[16:19], b[16:19])


def test_large_trace_builds_fast_enough() -> None:
    """A 300k-request trace is built and subset without per-request Python objects."""
    size = 300_000
    t = Trace(np.arange(size) * 0.01, np.full(size, 100), np.full(size, 10))
    half = t.take(np.arange(0, size, 2))
    assert len(half) == size // 2 and half.request_id(3) == "6"


def test_serving_fields_on_requests_and_round_trip() -> None:
    """cache_salt, lora_name and priority live in columns, reach TraceRequest, survive
    take/replace and from_requests; empty strings are refused."""
    t = Trace([0.0, 1.0, 2.0], [4, 4, 4], [1, 1, 1], cache_salts=["s", "", "s"],
              lora_names=["", "ad", ""], priorities=[0, -2, 5])
    assert (t[0].cache_salt, t[0].lora_name, t[0].priority) == ("s", None, 0)
    assert (t[1].cache_salt, t[1].lora_name, t[1].priority) == (None, "ad", -2)
    sub = t.take([1, 2])
    assert [r.priority for r in sub] == [-2, 5] and sub[1].cache_salt == "s"
    again = Trace.from_requests(list(t))
    assert [(r.cache_salt, r.lora_name, r.priority) for r in again] == \
        [(r.cache_salt, r.lora_name, r.priority) for r in t]
    assert Trace.from_requests([TraceRequest("x", 0.0, 1, 1)]).priorities is None
    with pytest.raises(ValueError, match="cache_salt"):
        TraceRequest("x", 0.0, 1, 1, cache_salt="")
