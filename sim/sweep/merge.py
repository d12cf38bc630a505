"""Merge finished cells into ``sweep.parquet`` and a short printed table.

One row per (cell, allocator): the cell's name and axis values, the allocator, the cell's
status, then every key of that allocator's summary entry and its counters (as
``counters.KEY``). A failed cell gives one row with ``allocator`` null, ``status`` "failed"
and its ``error``. Rows follow the cell order of the spec, then the allocator order of the
summary, so the table is the same whichever backend or worker ran which cell.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd  # type: ignore[import-untyped,unused-ignore]

from sim.sweep.spec import value_text

TABLE_COLUMNS = ("throughput_req_s", "norm_latency_mean_s", "ttft_p99_s", "mean_batch_size",
                 "num_preemptions", "kv_token_states_frac")
MAX_TABLE_ROWS = 40


def _column_value(value: Any) -> Any:
    return value_text(value) if isinstance(value, (list, tuple)) else value


def _flatten(prefix: str, entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in entry.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(f"{name}.", value))
        else:
            out[name] = _column_value(value)
    return out


def merge_rows(axes: list[str], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of sweep.parquet from cell markers given in cell order."""
    rows = []
    for record in records:
        base = {"cell": record["name"],
                **{k: _column_value(record["params"].get(k)) for k in axes}}
        if record.get("status") != "ok":
            rows.append({**base, "allocator": None, "status": "failed",
                         "error": record.get("error")})
            continue
        summary = record["summary"]
        counters = summary.get("counters", {})
        for name, entry in summary.get("allocators", {}).items():
            row = {**base, "allocator": name, "status": "ok", "error": None}
            row.update(_flatten("", entry))
            row.update(_flatten("counters.", counters.get(name, {})))
            rows.append(row)
    return rows


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Write the rows atomically (temp file in the same directory, then os.replace)."""
    frame = pd.DataFrame(rows)
    if "error" not in frame:
        frame["error"] = pd.Series([None] * len(frame), dtype=object)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return frame


def render_table(frame: pd.DataFrame, axes: list[str]) -> str:
    """A few headline columns per row; long sweeps show the first MAX_TABLE_ROWS rows."""
    if frame.empty:
        return "(no cells)"
    cols = [c for c in (*axes, "allocator", "status", *TABLE_COLUMNS) if c in frame]
    shown = frame[cols].head(MAX_TABLE_ROWS).astype(object).where(frame[cols].notna(), "-")
    text = [[_cell_text(v) for v in row] for row in shown.itertuples(index=False)]
    widths = [max(len(c), *(len(t[i]) for t in text)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(t, widths)) for t in text]
    if len(frame) > MAX_TABLE_ROWS:
        lines.append(f"... {len(frame) - MAX_TABLE_ROWS} more rows in sweep.parquet")
    return "\n".join(lines)


def _cell_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
