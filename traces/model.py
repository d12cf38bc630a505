"""The typed request stream every loader and generator produces.

`Trace` holds a whole trace column by column in read-only numpy arrays (1M requests cost
tens of MB, not a million objects) and yields `TraceRequest`s (records.py) on demand.
Token ids are computed per request on demand (see tokens.py). Transformations build new
`Trace`s; nothing here mutates in place.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from traces.checks import validate_columns
from traces.records import TraceMetadata, TraceRequest
from traces.tokens import (
    IntArray,
    Segments,
    TokenArray,
    TokenStore,
    derive_token_ids,
    own_tokens,
    segment_tokens,
)

__all__ = ["Trace", "TraceMetadata", "TraceRequest"]

_COLUMNS = ("ids", "arrival_s", "prompt_lens", "output_lens", "n", "beam_width",
            "session_ids", "turns", "lines", "token_src", "seg_first", "seg_count",
            "cache_salts", "lora_names", "priorities", "acceptance_rates")
_STRINGS = ("session_ids", "cache_salts", "lora_names")


def _ro(a: npt.ArrayLike, dtype: Any) -> Any:
    arr = np.asarray(a)
    if arr.dtype.kind != "U" or np.dtype(dtype).kind != "U":
        arr = arr.astype(dtype, copy=True)
    elif arr.flags.writeable:
        arr = arr.copy()
    arr.setflags(write=False)
    return arr


def _id_array(ids: npt.ArrayLike | None, size: int) -> Any:
    """Integer ids stay int64 (cheap for 1M rows, shown as str); others become str."""
    if ids is None:
        return _ro(np.arange(size), np.int64)
    arr = np.asarray(ids)
    return _ro(arr, np.int64 if arr.dtype.kind in "iu" else np.str_)


class Trace:
    """An ordered, validated request stream (arrival times non-decreasing).

    Columns are read-only arrays: arrival_s (float64), prompt_lens, output_lens, n,
    beam_width (int64), and optional session_ids, cache_salts, lora_names (str, "" = none),
    turns (-1 = none), lines (0 = none), priorities (int64, default 0), acceptance_rates
    (float64 in [0, 1], NaN = the simulation's rate). Request ids are
    `request_ids` (str array, built lazily) or `request_id(i)`; integer ids are kept as
    int64 internally. Index i is request i in
    arrival order. `prefix_lens[i]` is the number of prompt tokens from shared segments.
    """

    __slots__ = _COLUMNS + ("metadata", "seed", "vocab_size", "store", "segments",
                            "prefix_lens", "_id_strs")
    ids: npt.NDArray[Any]
    arrival_s: npt.NDArray[np.float64]
    prompt_lens: IntArray
    output_lens: IntArray
    n: IntArray
    beam_width: IntArray
    session_ids: npt.NDArray[np.str_] | None
    turns: IntArray | None
    lines: IntArray | None
    token_src: IntArray | None
    seg_first: IntArray | None
    seg_count: IntArray | None
    cache_salts: npt.NDArray[np.str_] | None
    lora_names: npt.NDArray[np.str_] | None
    priorities: IntArray | None
    acceptance_rates: npt.NDArray[np.float64] | None
    metadata: TraceMetadata
    seed: int
    vocab_size: int
    store: TokenStore | None
    segments: Segments
    prefix_lens: IntArray
    _id_strs: npt.NDArray[np.str_] | None

    def __init__(
        self, arrival_s: npt.ArrayLike, prompt_lens: npt.ArrayLike, output_lens: npt.ArrayLike,
        *, request_ids: npt.ArrayLike | None = None, ids: npt.ArrayLike | None = None, n: npt.ArrayLike | None = None,
        beam_width: npt.ArrayLike | None = None, session_ids: npt.ArrayLike | None = None,
        turns: npt.ArrayLike | None = None, lines: npt.ArrayLike | None = None,
        metadata: TraceMetadata | None = None, seed: int = 0, vocab_size: int = 32000,
        store: TokenStore | None = None, token_src: npt.ArrayLike | None = None,
        segments: Segments | None = None, seg_first: npt.ArrayLike | None = None,
        seg_count: npt.ArrayLike | None = None, cache_salts: npt.ArrayLike | None = None,
        lora_names: npt.ArrayLike | None = None, priorities: npt.ArrayLike | None = None,
        acceptance_rates: npt.ArrayLike | None = None, check_ids: bool = True,
    ) -> None:
        """Build and validate a trace; raises ValueError naming the first bad request.

        `request_ids` (or its alias `ids`) defaults to "0".."N-1"; `check_ids=False`
        skips the uniqueness check when the caller guarantees it (e.g. a subset).
        """
        size = len(np.asarray(arrival_s))
        self.ids = _id_array(request_ids if request_ids is not None else ids, size)
        self._id_strs = None
        self.arrival_s = _ro(arrival_s, np.float64)
        self.prompt_lens = _ro(prompt_lens, np.int64)
        self.output_lens = _ro(output_lens, np.int64)
        self.n = _ro(np.ones(size, np.int64) if n is None else n, np.int64)
        self.beam_width = _ro(np.ones(size, np.int64) if beam_width is None else beam_width,
                              np.int64)
        opt = {"session_ids": (session_ids, np.str_), "turns": (turns, np.int64),
               "lines": (lines, np.int64), "token_src": (token_src, np.int64),
               "seg_first": (seg_first, np.int64), "seg_count": (seg_count, np.int64),
               "cache_salts": (cache_salts, np.str_), "lora_names": (lora_names, np.str_),
               "priorities": (priorities, np.int64),
               "acceptance_rates": (acceptance_rates, np.float64)}
        for name, (val, dt) in opt.items():
            setattr(self, name, None if val is None else _ro(val, dt))
        self.seed, self.vocab_size, self.store = int(seed), int(vocab_size), store
        self.segments = segments if segments is not None else Segments.empty()
        self.prefix_lens = self._prefix_lengths()
        validate_columns(self, _COLUMNS,
                         check_ids and (request_ids is not None or ids is not None))
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if size else 0.0
        self.metadata = dataclasses.replace(metadata or TraceMetadata(), span_s=span,
                                            num_requests=size)

    @property
    def request_ids(self) -> npt.NDArray[np.str_]:
        """All request ids as a read-only str array (computed once on first use)."""
        if self._id_strs is None:
            self._id_strs = _ro(self.ids.astype(np.str_), np.str_)
        return self._id_strs

    def request_id(self, i: int) -> str:
        """Id of request i."""
        return str(self.ids[i])

    def _prefix_lengths(self) -> IntArray:
        if self.seg_first is None or self.seg_count is None or not len(self.segments):
            return _ro(np.zeros(len(self.arrival_s)), np.int64)  # type: ignore[no-any-return]
        csum = np.concatenate([[0], np.cumsum(self.segments.length)])
        total = csum[self.seg_first + self.seg_count] - csum[self.seg_first]
        return _ro(np.minimum(total, self.prompt_lens), np.int64)  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self.arrival_s)

    def __iter__(self) -> Iterator[TraceRequest]:
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i: int) -> TraceRequest:
        if not -len(self) <= i < len(self):
            raise IndexError(f"request index {i} out of range for {len(self)} requests")
        i = i % len(self)
        sid, salt, lora = (None if col is None or not col[i] else str(col[i])
                           for col in (self.session_ids, self.cache_salts, self.lora_names))
        turn = None if self.turns is None or self.turns[i] < 0 else int(self.turns[i])
        line = None if self.lines is None or self.lines[i] <= 0 else int(self.lines[i])
        priority = 0 if self.priorities is None else int(self.priorities[i])
        rate = None if self.acceptance_rates is None or np.isnan(self.acceptance_rates[i]) \
            else float(self.acceptance_rates[i])
        return TraceRequest(str(self.ids[i]), float(self.arrival_s[i]),
                            int(self.prompt_lens[i]), int(self.output_lens[i]),
                            int(self.n[i]), int(self.beam_width[i]), sid, turn, line,
                            salt, lora, priority, rate)

    def __repr__(self) -> str:
        m = self.metadata
        return f"Trace({len(self)} requests, format={m.format!r}, span={m.span_s:.1f}s)"

    @property
    def has_token_ids(self) -> bool:
        """True when prompt tokens come from the source (explicit ids or hash ids)."""
        return self.store is not None

    @property
    def has_prefix_structure(self) -> bool:
        """True when requests can share prompt prefixes (source tokens or segments)."""
        return self.store is not None or bool(len(self.segments))

    def prompt_token_ids(self, i: int) -> TokenArray:
        """Prompt token ids of request i: prefix segments, then the request's own tokens.

        Own tokens are the source's ids (explicit or hash-expanded), padded or replaced
        by `derive_token_ids(seed, request_id, k, ...)` for own-part positions k = 0, 1, ...
        """
        parts = []
        if self.seg_first is not None and self.seg_count is not None:
            first = int(self.seg_first[i])
            for j in range(first, first + int(self.seg_count[i])):
                parts.append(segment_tokens(self.segments, j, self.store, self.seed,
                                            self.vocab_size))
        pre = int(self.prefix_lens[i])
        src = -1 if self.token_src is None else int(self.token_src[i])
        parts.append(own_tokens(self.store, src, str(self.ids[i]), 0,
                                int(self.prompt_lens[i]) - pre, self.seed, self.vocab_size))
        return np.concatenate(parts)[: int(self.prompt_lens[i])]

    def derived_rows(self) -> npt.NDArray[np.bool_]:
        """Rows whose prompt is derived entirely under the request's own id (no shared
        segments, no source tokens): prompt and sample-0 outputs are then one run,
        ``derive_token_ids(seed, request_id, 0, prompt_len + output_len)``."""
        plain = self.prefix_lens == 0
        if self.seg_count is not None:
            plain &= self.seg_count == 0
        if self.store is not None and self.token_src is not None:
            plain &= self.token_src < 0
        return plain  # type: ignore[no-any-return]

    def output_token_ids(self, i: int, sample: int = 0) -> TokenArray:
        """Output ids of request i: `derive_token_ids(seed, request_id, prompt_len, output_len)`.

        Sample k > 0 of n (or beam k) uses the key f"{request_id}/{k}" instead.
        """
        rid = str(self.ids[i])
        key = rid if sample == 0 else f"{rid}/{sample}"
        return derive_token_ids(self.seed, key, int(self.prompt_lens[i]),
                                int(self.output_lens[i]), self.vocab_size)

    def prefix_block_ids(self, i: int) -> IntArray | None:
        """Source hash ids of request i (Mooncake-style), or None when there are none."""
        if self.store is None or self.store.kind != "hash" or self.token_src is None:
            return None
        src = int(self.token_src[i])
        return None if src < 0 else self.store.row(src)

    def columns(self) -> dict[str, Any]:
        """All constructor arguments; edit a copy and call `Trace(**cols)` to derive."""
        cols: dict[str, Any] = {name: getattr(self, name) for name in _COLUMNS}
        cols.update(metadata=self.metadata, seed=self.seed, vocab_size=self.vocab_size,
                    store=self.store, segments=self.segments)
        return cols

    def replace(self, **changes: Any) -> Trace:
        """A new Trace with some columns or attributes replaced."""
        cols = self.columns()
        cols["check_ids"] = "ids" in changes or "request_ids" in changes
        cols.update(changes)
        return Trace(**cols)

    def take(self, indices: npt.ArrayLike, **changes: Any) -> Trace:
        """A new Trace of the requests at `indices` (in that order), plus `changes`."""
        idx = np.asarray(indices, dtype=np.int64)
        cols = self.columns()
        cols.setdefault("check_ids", len(np.unique(idx)) != len(idx))
        for name in _COLUMNS:
            if cols[name] is not None and name not in changes:
                cols[name] = cols[name][idx]
        cols.update(changes)
        return Trace(**cols)

    @classmethod
    def from_requests(cls, requests: Iterable[TraceRequest], **kwargs: Any) -> Trace:
        """Build a Trace from TraceRequest objects (small traces and tests)."""
        reqs = list(requests)

        def opt(name: str, none: Any) -> list[Any] | None:
            values = [getattr(r, name) for r in reqs]
            return [none if v is None else v for v in values] \
                if any(v is not None and v != none for v in values) else None

        cols: Mapping[str, Any] = {
            "request_ids": np.array([r.request_id for r in reqs], dtype=np.str_),
            "n": [r.n for r in reqs], "beam_width": [r.beam_width for r in reqs],
            "session_ids": opt("session_id", ""), "turns": opt("turn", -1),
            "lines": opt("line", 0), "cache_salts": opt("cache_salt", ""),
            "lora_names": opt("lora_name", ""), "priorities": opt("priority", 0),
            "acceptance_rates": opt("acceptance_rate", math.nan),
        }
        return cls([r.arrival_s for r in reqs], [r.prompt_len for r in reqs],
                   [r.output_len for r in reqs], **cols, **kwargs)
