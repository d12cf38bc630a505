"""CSV trace formats: Azure LLM inference 2023/2024, BurstGPT, and generic CSV.

Parsing is vectorised with pandas (a 1M-row file loads in about a second). Azure rows
carry wall-clock timestamps (2023: naive, 7 fractional digits; 2024: with a UTC
offset), parsed in one ISO-8601 pass; BurstGPT rows carry seconds from the trace start
and mark failed requests with 0 response tokens, which are skipped and counted.
"""
from __future__ import annotations

import io
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped,unused-ignore]

from traces.columns import (
    SERVING_FIELDS,
    Columns,
    FloatArray,
    build_trace,
    length_column,
    number_column,
    require_columns,
    serving_columns,
)
from traces.errors import TraceError
from traces.limits import MAX_SAMPLES, MAX_TOKENS
from traces.model import Trace
from traces.rawfile import RawFile
from traces.tokens import IntArray

AZURE_COLUMNS = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
BURSTGPT_COLUMNS = ["Timestamp", "Request tokens", "Response tokens"]
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_TZ_SUFFIX = re.compile(r"(Z|[+-]\d\d:?\d\d)$")
_FIELD_COUNT = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def read_csv(raw: RawFile) -> tuple[Any, IntArray]:
    """The CSV as a DataFrame plus the 1-based file line of every data row."""
    try:
        df = pd.read_csv(io.BytesIO(raw.data), skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise TraceError(f"{raw.path}: empty file (no header)") from None
    except (pd.errors.ParserError, ValueError) as exc:
        text = str(exc).strip().splitlines()[-1]
        found = _FIELD_COUNT.search(text)
        if found:
            raise TraceError(f"{raw.path}:{found[2]}: malformed CSV row (expected "
                             f"{found[1]} fields, saw {found[3]})") from None
        raise TraceError(f"{raw.path}: malformed CSV ({text})") from None
    df.columns = [str(c).strip() for c in df.columns]
    if len(df) == 0:
        raise TraceError(f"{raw.path}: empty file (header only, no requests)")
    num_lines = raw.data.count(b"\n") + (not raw.data.endswith(b"\n"))
    if num_lines != len(df) + 1:
        rows = raw.data.split(b"\n")
        nonblank = [k + 1 for k, r in enumerate(rows) if r.strip()]
        lines = np.asarray(nonblank[1:len(df) + 1], dtype=np.int64)
    else:
        lines = np.arange(2, len(df) + 2, dtype=np.int64)
    return df, lines


def _arrow_nanos(series: Any, aware: bool) -> IntArray | None:
    """Epoch nanoseconds via pyarrow's ISO-8601 cast (about 5x faster than pandas), or
    None when pyarrow is absent or any value needs the slower, error-reporting path."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
        import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    try:
        arr = pc.cast(pa.array(series), pa.timestamp("ns", tz="UTC" if aware else None))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if arr.null_count:
        return None
    return np.asarray(arr.cast(pa.int64()).to_numpy(), dtype=np.int64)


def datetime_seconds(raw: RawFile, series: Any, lines: IntArray, name: str) -> FloatArray:
    """Seconds since the first row of ISO-8601 timestamps (naive or with offsets)."""
    nanos = _arrow_nanos(series, bool(_TZ_SUFFIX.search(str(series.iloc[0]).strip())))
    if nanos is not None:
        return np.asarray((nanos - nanos[0]) / 1e9, dtype=np.float64)
    text = series.astype(str).str.strip()
    stamps = pd.to_datetime(text, format="ISO8601", errors="coerce", utc=True)
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if bad.size:
        k = int(bad[0])
        raise TraceError(f"{raw.path}:{lines[k]}: field '{name}': not a timestamp "
                         f"({text.iloc[k]!r})")
    nanos = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    return np.asarray((nanos - nanos[0]) / 1e9, dtype=np.float64)


def arrival_column(
    raw: RawFile, series: Any, lines: IntArray, name: str, unit: str | None
) -> FloatArray:
    """Arrival seconds from a numeric column in `unit`, or from timestamps."""
    if unit == "datetime" or (unit is None and not pd.api.types.is_numeric_dtype(series)
                              and pd.to_numeric(series, errors="coerce").isna().all()):
        return datetime_seconds(raw, series, lines, name)
    if unit is not None and unit not in TIME_UNITS:
        raise TraceError(f"{raw.path}: --time-unit {unit}: unknown (choose from "
                         f"{', '.join(TIME_UNITS)} or datetime)")
    vals = number_column(raw, series, lines, name, integer=False, minimum=-np.inf)
    return np.asarray(vals * TIME_UNITS[unit or "s"], dtype=np.float64)


def load_azure(raw: RawFile, *, sort: bool, seed: int = 0) -> Trace:
    """Azure LLM inference trace 2023 or 2024 (TIMESTAMP, ContextTokens, GeneratedTokens)."""
    df, lines = read_csv(raw)
    require_columns(raw, list(df.columns), AZURE_COLUMNS)
    first = str(df["TIMESTAMP"].iloc[0]).strip()
    fmt = "azure-2024" if _TZ_SUFFIX.search(first) else "azure-2023"
    cols = Columns(
        fmt, datetime_seconds(raw, df["TIMESTAMP"], lines, "TIMESTAMP"),
        length_column(raw, df["ContextTokens"], lines, "ContextTokens"),
        length_column(raw, df["GeneratedTokens"], lines, "GeneratedTokens"),
        lines, "TIMESTAMP", num_rows=len(df))
    return build_trace(raw, cols, sort=sort, seed=seed)


def load_burstgpt(raw: RawFile, *, sort: bool, seed: int = 0) -> Trace:
    """BurstGPT CSV; rows with 0 response tokens (failed requests) are skipped and counted."""
    df, lines = read_csv(raw)
    require_columns(raw, list(df.columns), BURSTGPT_COLUMNS)
    arrival = number_column(raw, df["Timestamp"], lines, "Timestamp", integer=False,
                            minimum=0)
    prompt = length_column(raw, df["Request tokens"], lines, "Request tokens", minimum=0)
    output = length_column(raw, df["Response tokens"], lines, "Response tokens", minimum=0)
    failed = output == 0
    empty = (prompt == 0) & ~failed
    keep = ~(failed | empty)
    notes = [f"skipped {int(failed.sum())} failed rows (0 response tokens)"]
    if empty.any():
        notes.append(f"skipped {int(empty.sum())} rows with 0 request tokens")
    cols = Columns("burstgpt", arrival[keep], prompt[keep], output[keep], lines[keep],
                   "Timestamp", num_rows=len(df), num_skipped=int((~keep).sum()), notes=notes)
    return build_trace(raw, cols, sort=sort, seed=seed)


MAP_KEYS = ("arrival", "prompt_len", "output_len", "request_id", "session_id", "turn", "n",
            "beam_width", *SERVING_FIELDS)


def check_column_map(raw: RawFile, column_map: Mapping[str, str]) -> dict[str, str]:
    """Validate a {field: column} mapping; 'arrival_s' is accepted for 'arrival'."""
    cmap = {("arrival" if k == "arrival_s" else k): v for k, v in column_map.items()}
    unknown = sorted(set(cmap) - set(MAP_KEYS))
    if unknown:
        raise TraceError(f"{raw.path}: --columns: unknown field {unknown[0]!r} "
                         f"(known: {', '.join(MAP_KEYS)})")
    for need in ("prompt_len", "output_len"):
        if need not in cmap:
            raise TraceError(f"{raw.path}: --columns needs {need}=COL")
    return cmap


def mapped_columns(
    raw: RawFile, df: Any, lines: IntArray, column_map: Mapping[str, str], fmt: str,
    time_unit: str | None,
) -> Columns:
    """Columns for a generic table given a {field: column name} mapping."""
    cmap = check_column_map(raw, column_map)
    require_columns(raw, list(df.columns), list(cmap.values()))
    size = len(df)
    arrival = (arrival_column(raw, df[cmap["arrival"]], lines, cmap["arrival"], time_unit)
               if "arrival" in cmap else np.zeros(size))
    cols = Columns(fmt, arrival,
                   length_column(raw, df[cmap["prompt_len"]], lines, cmap["prompt_len"]),
                   length_column(raw, df[cmap["output_len"]], lines, cmap["output_len"]),
                   lines, cmap.get("arrival", "arrival"), num_rows=size)
    if "arrival" not in cmap:
        cols.notes.append("no arrival column: all requests arrive at time 0")
    if "request_id" in cmap:
        cols.ids = df[cmap["request_id"]].astype(str).to_numpy(dtype=np.str_)
        cols.id_field = cmap["request_id"]
    if "session_id" in cmap:
        cols.extra["session_ids"] = df[cmap["session_id"]].astype(str).to_numpy(np.str_)
    for key, dest, low, high in (("turn", "turns", 0, MAX_TOKENS), ("n", "n", 1, MAX_SAMPLES),
                                 ("beam_width", "beam_width", 1, MAX_SAMPLES)):
        if key in cmap:
            cols.extra[dest] = number_column(raw, df[cmap[key]], lines, cmap[key],
                                             integer=True, minimum=low, maximum=high)
    cols.extra.update(serving_columns(raw, {k: df[cmap[k]] for k in SERVING_FIELDS if k in cmap},
                                      lines))
    return cols


def load_generic_csv(
    raw: RawFile, column_map: Mapping[str, str], *, sort: bool, seed: int = 0,
    time_unit: str | None = None,
) -> Trace:
    """Any CSV, given which columns hold arrival, prompt_len, output_len (and optional ids)."""
    df, lines = read_csv(raw)
    cols = mapped_columns(raw, df, lines, column_map, "csv", time_unit)
    return build_trace(raw, cols, sort=sort, seed=seed)
