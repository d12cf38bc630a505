"""Sweep tables: one row per (cell, allocator), from sweep.parquet or from several result dirs.

``python -m sim.sweep`` merges its cells into ``sweep.parquet`` (each cell's parameters plus
every summary key). Several plain result directories give the same table: their config.json
scalars as parameters, their summary entries as the metrics, and the trace's request rate.
Capacity, as in the sweep issue, is the highest request rate whose mean normalised latency
stays under an SLO (default 0.2 s/token), counting only rates below the first violation.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from reports import schema as S
from reports.errors import ReportError
from reports.merge import check_mergeable, run_context
from reports.readers import read_json


def load_sweep(sources: list[Path]) -> pd.DataFrame:
    """The sweep table of one sweep directory (or sweep.parquet) or several result dirs.

    Failed cells are dropped (their count is in ``table.attrs["failed_cells"]``); a
    ``request_rate`` column (req/s) is added from each cell's trace summary when present;
    ``table.attrs["context"]`` holds the trace, model and GPU (merge.run_context).

    Raises:
        ReportError: a missing or malformed source, or result directories that differ in
            something other than a sweep axis (the message names the file or the field).
    """
    if len(sources) == 1 and not (sources[0] / S.SUMMARY_FILE).is_file():
        path = sources[0]
        file = path if path.suffix == ".parquet" else path / S.SWEEP_FILE
        table = _read_sweep_file(file)
        table.attrs["context"] = _cells_context(file.parent, table)
        return table
    check_mergeable(sources)
    table = pd.DataFrame([row for source in sources for row in _rows_of_run(source)])
    table.attrs["failed_cells"] = 0
    table.attrs["context"] = run_context(read_json(sources[0] / S.CONFIG_FILE))
    return table


def _cells_context(root: Path, table: pd.DataFrame) -> dict[str, str]:
    """Trace, model and GPU from the first cell that has a config.json."""
    cells = table[S.SWEEP_CELL].unique() if S.SWEEP_CELL in table.columns else []
    for cell in cells:
        config = root / S.SWEEP_CELLS_DIR / str(cell) / S.CONFIG_FILE
        if config.is_file():
            return run_context(read_json(config))
    return {}


def _read_sweep_file(file: Path) -> pd.DataFrame:
    if not file.is_file():
        raise ReportError(f"{file}: file not found (expected a result directory, a sweep "
                          f"directory holding {S.SWEEP_FILE}, or a capacity search holding "
                          "capacity.json)")
    try:
        table = pq.read_table(file).to_pandas()
    except (OSError, pa.ArrowException) as exc:
        raise ReportError(f"{file}: not a readable Parquet file: {exc}") from None
    missing = [c for c in (S.ALLOCATOR, S.NORM_LATENCY) if c not in table.columns]
    if missing:
        raise ReportError(f"{file}: missing column(s) {', '.join(missing)}")
    ok = table[S.ALLOCATOR].notna()
    if S.SWEEP_STATUS in table.columns:
        ok &= table[S.SWEEP_STATUS] == S.SWEEP_OK
    failed = table.loc[~ok, S.SWEEP_CELL].nunique() if S.SWEEP_CELL in table.columns \
        else int((~ok).sum())
    table = table[ok].reset_index(drop=True)
    table.attrs["failed_cells"] = int(failed)
    rates = _cell_rates(file.parent, table)
    if rates is not None:
        table["request_rate"] = table[S.SWEEP_CELL].map(rates)
    return table


def _cell_rates(root: Path, table: pd.DataFrame) -> dict[str, float] | None:
    """Request rate (req/s) of each cell, from cells/NAME/trace_summary.json; None if any
    cell lacks one (the plots then use rate_scale)."""
    if S.SWEEP_CELL not in table.columns or not len(table):
        return None
    rates = {}
    for cell in table[S.SWEEP_CELL].unique():
        path = root / S.SWEEP_CELLS_DIR / str(cell) / S.TRACE_SUMMARY_FILE
        if not path.is_file():
            return None
        rate = read_json(path).get("rate_per_s")
        if not isinstance(rate, (int, float)):
            return None
        rates[str(cell)] = float(rate)
    return rates


def _rows_of_run(result_dir: Path) -> list[dict[str, Any]]:
    summary = read_json(result_dir / S.SUMMARY_FILE)
    config = read_json(result_dir / S.CONFIG_FILE)
    trace = read_json(result_dir / S.TRACE_SUMMARY_FILE)
    entries = summary.get(S.ALLOCATORS_KEY)
    if not isinstance(entries, dict) or not entries:
        raise ReportError(f"{result_dir / S.SUMMARY_FILE}: {S.ALLOCATORS_KEY!r} must be a "
                          "non-empty object")
    params: dict[str, Any] = {}
    for section in ("options", "scheduler"):
        block = config.get(section)
        if isinstance(block, dict):
            params.update({k: v for k, v in block.items()
                           if isinstance(v, (int, float, str, bool)) and k not in params})
    if isinstance(trace.get("rate_per_s"), (int, float)):
        params["request_rate"] = float(trace["rate_per_s"])
    rows = []
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise ReportError(f"{result_dir / S.SUMMARY_FILE}: allocators.{name} is not an "
                              "object")
        rows.append({**params, S.SWEEP_CELL: str(result_dir), S.ALLOCATOR: name, **entry})
    return rows


def rate_column(table: pd.DataFrame) -> str | None:
    """The column giving the request rate, the first of SWEEP_RATE_COLUMNS present."""
    for column in S.SWEEP_RATE_COLUMNS:
        if column in table.columns and table[column].notna().any():
            return column
    return None


def param_label(column: str) -> str:
    """Words for a swept parameter in notes and headers."""
    return {"request_rate": "request rate (req/s)", "rate_scale": "rate scale",
            "block_size": "block size"}.get(column, column)


def rate_label(column: str) -> str:
    """Axis label for a rate column."""
    if column == "rate_scale":
        return "Request rate (x the trace's own rate)"
    return "Request rate (req/s)"


def fix_other_axes(table: pd.DataFrame, varying: str) -> tuple[pd.DataFrame, str]:
    """Hold every swept parameter except ``varying`` (and the allocator) at one value.

    For each other parameter, keeps the value under which ``varying`` takes the most distinct
    values (ties: block size 16, else the middle value), and returns the rows kept with a
    short note of what was held fixed. Rate columns count as one parameter.
    """
    notes = []
    rates = [c for c in S.SWEEP_RATE_COLUMNS if c in table.columns]
    params = [c for c in (S.SWEEP_BLOCK_SIZE, *rates[:1], "trace", "model", "gpu")
              if c in table.columns and c != varying
              and not (varying in S.SWEEP_RATE_COLUMNS and c in S.SWEEP_RATE_COLUMNS)]
    for column in params:
        values = sorted(table[column].dropna().unique(), key=str)
        if len(values) < 2:
            continue
        middle = sorted(values)[len(values) // 2] if column in rates else None
        chosen = max(values, key=lambda v: (
            table.loc[table[column] == v, varying].nunique(),
            v == 16 if column == S.SWEEP_BLOCK_SIZE else v == middle))
        table = table[table[column] == chosen]
        notes.append(f"{param_label(column)} {chosen:.3g}" if isinstance(chosen, float) else
                     f"{param_label(column)} {chosen}")
    return table, ", ".join(notes)


def capacity(rates: list[float], latencies: list[float | None],
             slo: float) -> tuple[float | None, bool]:
    """Highest rate, in increasing order, before normalised latency first exceeds ``slo``.

    Returns:
        (capacity or None when even the lowest rate exceeds the SLO, whether the SLO was
        exceeded at some rate; False means the true capacity may be higher).
    """
    best = None
    for rate, latency in sorted(zip(rates, latencies), key=lambda p: p[0]):
        if latency is None or math.isnan(latency) or latency > slo:
            return best, True
        best = rate
    return best, False


def capacity_text(value: float | None, exceeded: bool) -> str:
    """A capacity for people: "4.03", ">= 16.1" (never exceeded) or "below the lowest rate"."""
    if value is None:
        return "below the lowest rate"
    return f"{value:.3g}" if exceeded else f">= {value:.3g}"


def capacity_table(table: pd.DataFrame, slo: float) -> list[tuple[str, float | None, bool]]:
    """(allocator, capacity) for each allocator of a rate sweep, in first-seen order."""
    column = rate_column(table)
    if column is None:
        return []
    fixed, _ = fix_other_axes(table, column)
    out = []
    for name in dict.fromkeys(fixed[S.ALLOCATOR]):
        rows = fixed[fixed[S.ALLOCATOR] == name]
        out.append((name, *capacity(rows[column].astype(float).tolist(),
                                    [None if pd.isna(v) else float(v)
                                     for v in rows[S.NORM_LATENCY]], slo)))
    return out
