"""Column validation shared by all loaders, with errors that point at the source line.

Each loader turns its file into plain columns plus the source line of every row; the
checks here are vectorised (a 1M-row file costs milliseconds) and, on failure, report
only the first bad row: file, line, field and value. `build_trace` applies the
ordering and uniqueness rules and returns a Trace, so nothing half-loaded escapes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped,unused-ignore]

from traces.checks import duplicate_index
from traces.errors import TraceError
from traces.limits import MAX_SPAN_S, MAX_TOKENS
from traces.model import Trace, TraceMetadata
from traces.rawfile import RawFile
from traces.tokens import IntArray, TokenStore

FloatArray = npt.NDArray[np.float64]


def _fail(raw: RawFile, line: int, field_name: str, problem: str) -> TraceError:
    return TraceError(f"{raw.path}:{line}: field '{field_name}': {problem}")


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def number_column(
    raw: RawFile, values: Any, lines: IntArray, name: str, *, integer: bool, minimum: float,
    maximum: float = math.inf,
) -> Any:
    """Values as int64 (integer=True) or finite float64, each in [minimum, maximum].

    Raises:
        TraceError: first missing, NaN, non-numeric, fractional, too small or too large
            value (too large is checked before any cast, so nothing overflows).
    """
    series = values if isinstance(values, pd.Series) else pd.Series(values, dtype=object)
    if pd.api.types.is_integer_dtype(series.dtype) and series.dtype != bool:
        ints = series.to_numpy(dtype=np.int64)
        if (low := np.flatnonzero(ints < minimum)).size:
            what = "negative" if ints[low[0]] < 0 else f"must be >= {minimum:g}"
            raise _fail(raw, int(lines[low[0]]), name, f"{what} ({ints[low[0]]})")
        _check_maximum(raw, ints, lines, name, maximum)
        return ints if integer else ints.astype(np.float64)
    if series.dtype == bool or (series.dtype == object and
                                series.map(type).isin([bool]).any()):
        bad = int(np.flatnonzero(series.map(type).isin([bool]).to_numpy())[0])
        raise _fail(raw, int(lines[bad]), name, f"not a number ({_show(series.iloc[bad])})")
    nums = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad_mask = ~np.isfinite(nums)
    if bad_mask.any():
        k = int(np.flatnonzero(bad_mask)[0])
        orig = series.iloc[k]
        missing = orig is None or (isinstance(orig, float) and np.isnan(orig)) or orig == ""
        what = "missing or NaN value" if missing else f"not a finite number ({_show(orig)})"
        raise _fail(raw, int(lines[k]), name, what)
    _check_maximum(raw, nums, lines, name, maximum)
    if integer and (frac := np.flatnonzero(nums != np.floor(nums))).size:
        raise _fail(raw, int(lines[frac[0]]), name, f"not an integer ({_show(nums[frac[0]])})")
    if (low := np.flatnonzero(nums < minimum)).size:
        what = "negative" if nums[low[0]] < 0 else f"must be >= {minimum:g}"
        raise _fail(raw, int(lines[low[0]]), name, f"{what} ({_show(nums[low[0]])})")
    return nums.astype(np.int64) if integer else nums


def length_column(raw: RawFile, values: Any, lines: IntArray, name: str, minimum: int = 1) -> Any:
    """Token counts: integers in [minimum, MAX_TOKENS] (see traces/limits.py)."""
    return number_column(raw, values, lines, name, integer=True, minimum=minimum,
                         maximum=MAX_TOKENS)


SERVING_FIELDS = {"cache_salt": "cache_salts", "lora_name": "lora_names",
                  "priority": "priorities", "acceptance_rate": "acceptance_rates"}
"""Optional per-request serving fields: source key -> Trace column."""
PRIORITY_LIMIT = 2**53
"""Priorities are integers of magnitude below 2^53 (exact in JSON and in float64)."""


def string_column(raw: RawFile, values: Any, lines: IntArray, name: str) -> Any:
    """Optional non-empty strings; missing values (null or absent) become "".

    Raises:
        TraceError: the first value that is not a string, or an empty string.
    """
    series = values if isinstance(values, pd.Series) else pd.Series(values, dtype=object)
    present = series.notna().to_numpy()
    is_str = series.map(lambda v: isinstance(v, str)).to_numpy(dtype=bool)
    if (bad := np.flatnonzero(present & ~is_str)).size:
        value = series.iloc[int(bad[0])]
        raise _fail(raw, int(lines[bad[0]]), name, f"expected a string, got {_kind(value)}")
    out = np.where(present, series.astype(object).where(series.notna(), ""), "")
    out = out.astype(np.str_)
    if (empty := np.flatnonzero(present & (np.char.str_len(out) == 0))).size:
        raise _fail(raw, int(lines[empty[0]]), name, "empty string (omit the field instead)")
    return out


def _kind(value: Any) -> str:
    """A JSON value's kind for messages: "a number (5)", "a list", ..."""
    if isinstance(value, (bool, np.bool_)):
        return f"a boolean ({str(bool(value)).lower()})"
    if isinstance(value, (int, float, np.number)):
        num = float(value)
        return f"a number ({int(num) if num.is_integer() else _show(num)})"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def serving_columns(raw: RawFile, columns: dict[str, Any], lines: IntArray) -> dict[str, Any]:
    """Trace columns for the serving fields present in `columns` (field name -> values).

    cache_salt and lora_name must be non-empty strings, priority an integer,
    acceptance_rate a number in [0, 1]; a request without the field gets no salt, no adapter,
    priority 0 and the simulation's acceptance rate (NaN). Fields no row has are skipped.
    """
    extra: dict[str, Any] = {}
    for name, values in columns.items():
        series = values if isinstance(values, pd.Series) else pd.Series(values, dtype=object)
        if not series.notna().any():
            continue
        dest = SERVING_FIELDS[name]
        if name == "priority":
            filled = series.astype(object).where(series.notna(), 0)
            extra[dest] = number_column(raw, filled, lines, name, integer=True,
                                        minimum=-PRIORITY_LIMIT, maximum=PRIORITY_LIMIT)
        elif name == "acceptance_rate":
            present = series.notna().to_numpy()
            rates = number_column(raw, series.astype(object).where(series.notna(), 0), lines,
                                  name, integer=False, minimum=0, maximum=1)
            extra[dest] = np.where(present, rates, np.nan)
        else:
            extra[dest] = string_column(raw, series, lines, name)
    return extra


def _check_maximum(raw: RawFile, nums: Any, lines: IntArray, name: str, maximum: float) -> None:
    if (high := np.flatnonzero(nums > maximum)).size:
        value = nums[high[0]]
        shown = int(value) if value == np.floor(value) and abs(value) < 2.0**63 else value
        raise _fail(raw, int(lines[high[0]]), name, f"{_show(shown)} is too large (at most "
                    f"{maximum:,.0f} per request)")


def require_columns(raw: RawFile, have: list[str], need: list[str], line: int = 1) -> None:
    """Raise a TraceError naming the first required column the header lacks."""
    for name in need:
        if name not in have:
            raise _fail(raw, line, name, f"missing column (found {have[:12]})")


@dataclass(slots=True)
class Columns:
    """Parsed columns of one file, before ordering rules are applied."""

    fmt: str
    arrival: FloatArray
    prompt: IntArray
    output: IntArray
    lines: IntArray
    time_field: str
    ids: npt.NDArray[Any] | None = None
    id_field: str = "request_id"
    extra: dict[str, Any] = field(default_factory=dict)
    store: TokenStore | None = None
    token_src: IntArray | None = None
    num_rows: int = 0
    num_skipped: int = 0
    notes: list[str] = field(default_factory=list)


def _order(raw: RawFile, cols: Columns, sort: bool) -> IntArray | None:
    back = np.flatnonzero(np.diff(cols.arrival) < 0)
    if not back.size:
        return None
    if not sort:
        line = int(cols.lines[back[0] + 1])
        raise _fail(raw, line, cols.time_field, "timestamps not sorted (earlier than the "
                    "previous row); use --sort (sort=True) to sort them")
    cols.notes.append(f"sorted {back.size} out-of-order rows by arrival time")
    return np.argsort(cols.arrival, kind="stable")


def _check_span(raw: RawFile, cols: Columns, arrival: FloatArray, lines: IntArray) -> None:
    span = float(arrival[-1])
    if span > MAX_SPAN_S:
        hint = ("; is --time-unit right?" if cols.fmt in ("csv", "jsonl")
                else "; are the timestamps in the format's unit?")
        raise _fail(raw, int(lines[-1]), cols.time_field,
                    f"arrivals span {span:.3g} s, more than {MAX_SPAN_S:.0e} s (about 32 "
                    f"years){hint}")


def build_trace(raw: RawFile, cols: Columns, *, sort: bool, seed: int = 0) -> Trace:
    """Check order and ids, rebase times to the first arrival, and build the Trace."""
    if len(cols.arrival) == 0:
        raise TraceError(f"{raw.path}: no requests left after skipping "
                         f"{cols.num_skipped} rows")
    if cols.ids is not None and (dup := duplicate_index(cols.ids)) is not None:
        raise _fail(raw, int(cols.lines[dup]), cols.id_field,
                    f"duplicate request id {_show(str(cols.ids[dup]))}")
    order = _order(raw, cols, sort)
    arrays: dict[str, Any] = {"arrival_s": cols.arrival, "prompt_lens": cols.prompt,
                              "output_lens": cols.output, "lines": cols.lines,
                              "ids": cols.ids, "token_src": cols.token_src, **cols.extra}
    arrays = {k: v if v is None or order is None else v[order] for k, v in arrays.items()}
    arrays["arrival_s"] = arrays["arrival_s"] - arrays["arrival_s"][0]
    _check_span(raw, cols, arrays["arrival_s"], arrays["lines"])
    meta = TraceMetadata(source=str(raw.path), format=cols.fmt, num_rows=cols.num_rows,
                         num_skipped=cols.num_skipped, sha256=raw.sha256,
                         notes=tuple(cols.notes))
    try:
        return Trace(**arrays, metadata=meta, seed=seed, store=cols.store,
                     check_ids=False)
    except ValueError as exc:
        raise TraceError(f"{raw.path}: {exc}") from None
