"""JSON-lines files as columns: a vectorised pyarrow path with an exact fallback.

Decoding a million JSON lines one by one in Python takes tens of seconds, so files are
first read with pyarrow's multi-threaded JSON reader. Anything it cannot read cleanly
(a truncated line, a missing key, a type it would have to guess) falls back to the
line-by-line reader, which names the offending line; so both paths accept exactly the
same files and report errors the same way.
"""
from __future__ import annotations

import io
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped,unused-ignore]

from traces.errors import TraceError
from traces.rawfile import RawFile, parse_jsonl
from traces.tokens import IntArray

Records = list[dict[str, Any]]
IdList = tuple[IntArray, IntArray, npt.NDArray[np.bool_]]


@dataclass(slots=True)
class Table:
    """Columns of a JSON-lines file. Invariant: every column has num_rows entries.

    scalars: key -> pandas Series (None/NaN where a record lacks the key).
    lists: key -> (flat values, offsets of length num_rows + 1, present mask).
    """

    num_rows: int
    lines: IntArray
    scalars: dict[str, Any]
    lists: dict[str, IdList]


def read_table(raw: RawFile, scalar_keys: tuple[str, ...], list_keys: tuple[str, ...],
               required: tuple[str, ...]) -> Table:
    """Read the requested keys of a JSONL file; raises TraceError on any bad line."""
    fast = _arrow_table(raw, scalar_keys, list_keys, required)
    if fast is not None:
        return fast
    recs, line_list = parse_jsonl(raw)
    return table_from_records(raw, recs, np.asarray(line_list, dtype=np.int64), scalar_keys,
                              list_keys, required)


def table_from_records(raw: RawFile, recs: Records, lines: IntArray,
                       scalar_keys: tuple[str, ...], list_keys: tuple[str, ...],
                       required: tuple[str, ...]) -> Table:
    """Columns from already-decoded records (the exact, line-reporting path)."""
    for key in required:
        for k, rec in enumerate(recs):
            if key not in rec:
                raise TraceError(f"{raw.path}:{lines[k]}: field '{key}': missing "
                                 f"(record has {sorted(rec)[:8]})")
    scalars = {key: pd.Series([rec.get(key) for rec in recs], dtype=object)
               for key in scalar_keys}
    lists = {key: _id_lists(raw, recs, lines, key) for key in list_keys}
    return Table(len(recs), lines, scalars, lists)


def _id_lists(raw: RawFile, recs: Records, lines: IntArray, key: str) -> IdList:
    """Flatten per-record lists of non-negative ints into (values, offsets, present)."""
    lists = [rec.get(key) for rec in recs]
    present = np.fromiter((x is not None for x in lists), dtype=bool, count=len(lists))
    counts = np.fromiter((len(x) if isinstance(x, list) else -1 for x in lists if x is not None),
                         dtype=np.int64)
    try:
        if (counts < 0).any():
            raise TypeError
        values = np.fromiter(itertools.chain.from_iterable(x for x in lists if x is not None),
                             dtype=np.int64, count=int(counts.sum()))
        if values.size and values.min() < 0:
            raise TypeError
    except (TypeError, ValueError, OverflowError):
        for k, x in enumerate(lists):
            if x is not None and (not isinstance(x, list) or
                                  any(type(v) is not int or v < 0 for v in x)):
                raise TraceError(f"{raw.path}:{lines[k]}: field '{key}': expected a list "
                                 "of non-negative integers") from None
        raise
    full = np.zeros(len(lists), dtype=np.int64)
    full[present] = counts
    return values, np.concatenate([[0], np.cumsum(full)]).astype(np.int64), present


def _line_numbers(raw: RawFile, num_rows: int) -> IntArray | None:
    if raw.data.count(b"\n") + (not raw.data.endswith(b"\n")) == num_rows:
        return np.arange(1, num_rows + 1, dtype=np.int64)
    nonblank = [k + 1 for k, row in enumerate(raw.data.split(b"\n")) if row.strip()]
    return np.asarray(nonblank, dtype=np.int64) if len(nonblank) == num_rows else None


def _arrow_table(raw: RawFile, scalar_keys: tuple[str, ...], list_keys: tuple[str, ...],
                 required: tuple[str, ...]) -> Table | None:
    """The pyarrow fast path, or None to use the exact path."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
        import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]
        import pyarrow.json as pj  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    try:
        tb = pj.read_json(io.BytesIO(raw.data))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    names = set(tb.column_names)
    if any(k not in names or tb.column(k).null_count for k in required):
        return None
    lines = _line_numbers(raw, tb.num_rows)
    if lines is None:
        return None
    scalars: dict[str, Any] = {}
    for key in scalar_keys:
        col = tb.column(key) if key in names else pa.nulls(tb.num_rows)
        if pa.types.is_nested(col.type):
            return None
        scalars[key] = pd.Series(col.to_numpy(zero_copy_only=False))
    lists: dict[str, IdList] = {}
    for key in list_keys:
        arr = tb.column(key).combine_chunks() if key in names else None
        if arr is None:
            zeros = np.zeros(tb.num_rows + 1, dtype=np.int64)
            lists[key] = (zeros[:0], zeros, np.zeros(tb.num_rows, dtype=bool))
            continue
        if not (pa.types.is_list(arr.type) and pa.types.is_integer(arr.type.value_type)):
            return None
        flat = arr.flatten()
        if flat.null_count:
            return None
        values = flat.to_numpy(zero_copy_only=False).astype(np.int64)
        if values.size and values.min() < 0:
            return None
        counts = pc.list_value_length(arr).fill_null(0).to_numpy().astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        lists[key] = (values, offsets, arr.is_valid().to_numpy(zero_copy_only=False))
    return Table(tb.num_rows, lines, scalars, lists)
