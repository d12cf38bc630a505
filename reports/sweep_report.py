"""Assemble a sweep report: capacity table, the two sweep figures and a table of the results.

Sources are a sweep directory written by ``python -m sim.sweep`` (sweep.parquet) or several
result directories; the report goes to the sweep directory, or to ``comparison/`` beside the
result directories, unless an output directory is given. Long sweeps list at most
``MAX_ROWS`` results in the page; sweep.parquet holds them all.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from reports import html_report as H
from reports import md_report as M
from reports import schema as S
from reports.build import HTML_FILE, MD_FILE, check_format, draw
from reports.captions import SWEEP_FIGURES
from reports.merge import context_line
from reports.style import write_text
from reports.sweep import capacity_table, capacity_text, load_sweep, param_label, rate_column
from reports.sweep_plots import plot_latency_vs_rate, plot_waste_vs_block_size
from reports.tables import Row, format_value, shown_unit

MAX_ROWS = 300
METRICS = ("norm_latency_mean_s", "throughput_req_s", "mean_batch_size", "kv_token_states_frac",
           "num_preemptions")


def sweep_out_dir(sources: list[Path]) -> Path:
    """Default output: the sweep directory itself, or ``comparison`` beside several runs."""
    if len(sources) == 1 and not (sources[0] / S.SUMMARY_FILE).is_file():
        return sources[0].parent if sources[0].suffix == ".parquet" else sources[0]
    return Path(os.path.commonpath([str(p.resolve()) for p in sources])) / "comparison"


def build_sweep(sources: list[Path], out_dir: Path | None, fmt: str = "png",
                slo: float | None = None) -> Path:
    """Write plots/, report.html and report.md of a sweep; returns report.html's path."""
    check_format(fmt)
    slo = S.DEFAULT_SLO_S if slo is None else slo
    table = load_sweep(sources)
    out = out_dir or sweep_out_dir(sources)
    figures = [
        draw("latency_vs_rate", plot_latency_vs_rate(table, slo), out, fmt, SWEEP_FIGURES,
             "the sweep does not vary the request rate"),
        draw("waste_vs_block_size", plot_waste_vs_block_size(table), out, fmt, SWEEP_FIGURES,
             "the sweep does not vary the block size"),
    ]
    column = rate_column(table)
    cap_header = [f"capacity, {param_label(column)}" if column else "capacity"]
    caps: list[Row] = [(name, "", [capacity_text(c, exceeded)])
                       for name, c, exceeded in capacity_table(table, slo)]
    header, rows = result_rows(table)
    lead = _lead(table, slo)
    sections = [("capacity", "Capacity", H.table_html(cap_header, caps, "allocator")),
                ("figures", "Figures", H.figures_html(figures, out)),
                ("results", "Results", H.table_html(header, rows, "allocator"))]
    footer = f"Written by python -m reports from {', '.join(map(str, sources))}."
    html_path = write_text(out / HTML_FILE, H.page("pagedsim sweep report", sections, lead,
                                                    footer))
    write_text(out / MD_FILE, M.document("pagedsim sweep report", lead, [
        ("Capacity", M.table_md(cap_header, caps, "allocator")),
        ("Figures", M.figures_md(figures, out)),
        ("Results", M.table_md(header, rows, "allocator")),
    ]))
    return html_path


def _lead(table: pd.DataFrame, slo: float) -> list[str]:
    lead = [(f"{len(table)} results of {table[S.ALLOCATOR].nunique()} allocator(s) "
             f"({context_line(table.attrs.get('context') or {})}). Capacity is the highest "
             f"request rate whose mean normalised latency stays <= {1000.0 * slo:g} ms/token.")]
    if table.attrs.get("failed_cells"):
        lead.append(f"{table.attrs['failed_cells']} failed cell(s) left out "
                    "(their errors are in sweep.parquet).")
    if len(table) > MAX_ROWS:
        lead.append(f"The results table shows the first {MAX_ROWS} rows.")
    return lead


def result_rows(table: pd.DataFrame) -> tuple[list[str], list[Row]]:
    """The sweep as a table: a row per result (allocator, swept values, key metrics)."""
    params = [c for c in (S.SWEEP_BLOCK_SIZE, *S.SWEEP_RATE_COLUMNS)
              if c in table.columns and table[c].nunique() > 1]
    metrics = [k for k in METRICS if k in table.columns]
    header = [param_label(p) for p in params]
    for key in metrics:
        label, unit, kind = S.SUMMARY_KEYS[key]
        shown = shown_unit(unit, kind)
        header.append(f"{label} ({shown})" if shown else label)
    rows: list[Row] = []
    for _, row in table.head(MAX_ROWS).iterrows():
        cells = [format_value(row[p]) for p in params]
        cells += [format_value(None if pd.isna(row[k]) else row[k], S.SUMMARY_KEYS[k][2])
                  for k in metrics]
        rows.append((str(row[S.ALLOCATOR]), "", cells))
    return header, rows
