"""Assemble a capacity-search report: the capacity table, the paged / max ratio, two figures.

Written into the capacity-search directory (or ``--out``) as report.html and report.md, or
under another stem (capacity_report.html / .md) when that directory also holds a sweep.
Latencies read in ms/token; the SLO given to the search in s/token is shown in ms/token too.
"""
from __future__ import annotations

from pathlib import Path

from reports import html_report as H
from reports import md_report as M
from reports.build import check_format, draw
from reports.capacity import (
    STATUS_WORDS,
    CapacityResults,
    capacity_cell,
    load_capacity,
    point_label,
)
from reports.capacity_plots import metric_scale, plot_capacity_bars, plot_capacity_probes
from reports.merge import context_line
from reports.style import write_text
from reports.tables import Row

FIGURES = {
    "capacity_probes": (
        "Capacity search probes",
        ("Every probe of every search: the metric at each probed request rate (log scale), the "
         "SLO (grey dashed) and each capacity found (dotted, in the allocator's colour). "
         "Bracketing doubles the rate while the SLO holds, then bisection narrows the bracket.")),
    "capacity_bars": (
        "Capacity per allocator",
        ("The highest request rate whose metric stayed within the SLO. A hatched bar is only a "
         "bound: the search reached its largest rate (>=) without missing the SLO.")),
}


def capacity_rows(results: CapacityResults) -> tuple[list[str], list[Row]]:
    """One row per search: point of the axes, capacity, status, upper bound, probes."""
    header = ([", ".join(results.axes)] if results.axes else []) + [
        "capacity", "status", "lowest rate scale that missed", "probes"]
    rows: list[Row] = []
    for s in results.searches:
        upper = s.get("upper_rate_scale")
        cells = ([point_label(s, results.axes)] if results.axes else []) + [
            capacity_cell(s), STATUS_WORDS.get(str(s.get("status")), str(s.get("status"))),
            "n/a" if upper is None else f"{upper:.3g}", str(len(s["probes"]))]
        rows.append((str(s["allocator"]), "", cells))
    return header, rows


def ratio_lines(results: CapacityResults) -> list[str]:
    """"paged / max capacity: 2.10" per point of the axes (a bound when a search hit a limit)."""
    lines = []
    for r in results.ratios:
        where = ", ".join(f"{k}={r.get(k)}" for k in results.axes)
        ratio = r.get("ratio")
        text = "n/a" if not isinstance(ratio, (int, float)) else f"{ratio:.2f}"
        bound = "" if r.get("exact") else " (a bound: a search hit its rate limit)"
        lines.append(f"paged / max capacity{' at ' + where if where else ''}: {text}{bound}")
    return lines


def _lead(results: CapacityResults) -> list[str]:
    factor, label = metric_scale(results.metric)
    unit = " ms/token" if factor == 1000.0 else ""
    tolerance = float(results.settings.get("tolerance", 0))
    return [(f"Capacity search ({context_line(results.context)}): for each allocator, the "
             f"highest rate whose {label.split(' (')[0].lower()} stays <= "
             f"{factor * results.slo:g}{unit}, bisected to {tolerance:.0%}."),
            *ratio_lines(results)]


def _settings(results: CapacityResults) -> list[tuple[str, str]]:
    factor, _ = metric_scale(results.metric)
    return [(k, f"{v:g} s/token ({1000.0 * v:g} ms/token)" if k == "slo" and factor == 1000.0
             else str(v)) for k, v in results.settings.items()]


def build_capacity(path: Path, out_dir: Path | None = None, fmt: str = "png",
                   stem: str = "report") -> Path:
    """Write plots/, STEM.html and STEM.md of a capacity search; returns the HTML path."""
    check_format(fmt)
    results = load_capacity(path)
    out = out_dir or path
    html_name, md_name = f"{stem}.html", f"{stem}.md"
    figures = [draw("capacity_probes", plot_capacity_probes(results), out, fmt, FIGURES, ""),
               draw("capacity_bars", plot_capacity_bars(results), out, fmt, FIGURES, "")]
    header, rows = capacity_rows(results)
    lead = _lead(results)
    settings = _settings(results)
    sections = [("capacity", "Capacity", H.table_html(header, rows, "allocator")),
                ("figures", "Figures", H.figures_html(figures, out)),
                ("settings", "Search settings", H.pairs_html(settings))]
    footer = f"Written by python -m reports from {path}."
    html = write_text(out / html_name, H.page("pagedsim capacity report", sections, lead, footer))
    write_text(out / md_name, M.document("pagedsim capacity report", lead, [
        ("Capacity", M.table_md(header, rows, "allocator")),
        ("Figures", M.figures_md(figures, out)),
        ("Search settings", M.pairs_md(settings))]))
    return html
