"""Assemble a run report: draw every figure, save the images, write report.html and report.md.

``build_run_report`` handles one result directory (reports/sweep_report.py does sweeps).
Figures that do not apply (no prefix caching, or a trace without shared content) are listed as
not drawn, with the reason, instead of appearing empty. All files are written atomically,
images under ``plots/`` beside the two reports.
"""
from __future__ import annotations

from collections.abc import Callable
from html import escape
from pathlib import Path

from matplotlib.figure import Figure

from reports import html_report as H
from reports import md_report as M
from reports.batch import plot_batch_size
from reports.captions import GLOSSARY, RUN_FIGURES
from reports.fragmentation import plot_fragmentation_cdfs
from reports.latency import plot_latency_cdfs
from reports.memory import plot_memory_timeline, plot_waste_bars
from reports.prefix import plot_prefix_cache, skip_reason
from reports.readers import RunResults, load_run
from reports.style import FORMATS, save_figure, write_text
from reports.tables import findings, flat_rows, headline, summary_rows

PLOTS_DIR = "plots"
HTML_FILE = "report.html"
MD_FILE = "report.md"
RUN_PLOTS: dict[str, tuple[Callable[[RunResults], Figure | None],
                           Callable[[RunResults], str | None]]] = {
    "waste_bars": (plot_waste_bars, lambda run: None),
    "memory_timeline": (plot_memory_timeline, lambda run: None),
    "fragmentation_cdfs": (plot_fragmentation_cdfs, lambda run: None),
    "batch_size": (plot_batch_size, lambda run: None),
    "latency_cdfs": (plot_latency_cdfs, lambda run: None),
    "prefix_cache": (plot_prefix_cache, skip_reason),
}


def check_format(fmt: str) -> None:
    """Refuse an image format other than png or svg (ValueError)."""
    if fmt not in FORMATS:
        raise ValueError(f"image format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def draw(slug: str, fig: Figure | None, out: Path, fmt: str, titles: dict[str, tuple[str, str]],
         note: str) -> H.FigureEntry:
    """Save ``fig`` (if drawn) under plots/ and describe it for the reports."""
    title, caption = titles[slug]
    path = out / PLOTS_DIR / f"{slug}.{fmt}"
    if fig is None:
        path.unlink(missing_ok=True)   # a figure from an earlier report must not linger
        return H.FigureEntry(slug, title, caption, None, note)
    save_figure(fig, path, fmt)
    fig.clear()
    return H.FigureEntry(slug, title, caption, path)


def run_figures(run: RunResults, out: Path, fmt: str) -> list[H.FigureEntry]:
    """Draw and save every run figure; one entry per figure, drawn or not."""
    return [draw(slug, fn(run), out, fmt, RUN_FIGURES, reason(run) or "")
            for slug, (fn, reason) in RUN_PLOTS.items()]


def build_run_report(result_dir: Path, out_dir: Path | None, fmt: str = "png") -> Path:
    """Write plots/, report.html and report.md for one run; returns report.html's path."""
    check_format(fmt)
    run = load_run(result_dir)
    out = out_dir or result_dir
    figures = run_figures(run, out, fmt)
    names = run.allocators
    lead = headline(run.info, run.config, run.trace_summary, names)
    rows = summary_rows(run.summary, run.counters)
    config, trace = flat_rows(run.config), flat_rows(run.trace_summary)
    glossary = "".join(f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in GLOSSARY)
    found = findings(run.summary)
    sections = [
        ("findings", "Key numbers", "<ul>" + "".join(f"<li>{escape(x)}</li>" for x in found)
         + "</ul>"),
        ("summary", "Summary", H.table_html(names, rows, "metric")),
        ("figures", "Figures", H.figures_html(figures, out)),
        ("glossary", "How to read this report", f"<ul>{glossary}</ul>"),
        ("config", "Configuration", H.pairs_html(config)),
        ("trace", "Trace summary", H.pairs_html(trace)),
    ]
    footer = f"Written by python -m reports from the result files in {result_dir}."
    html_path = write_text(out / HTML_FILE, H.page("pagedsim run report", sections, lead,
                                                    footer))
    write_text(out / MD_FILE, M.document("pagedsim run report", lead, [
        ("Key numbers", "\n".join(f"- {x}" for x in found)),
        ("Summary", M.table_md(names, rows)),
        ("Figures", M.figures_md(figures, out) + f"\n\nFull report: [{HTML_FILE}]({HTML_FILE})"),
        ("Configuration", M.pairs_md(config)),
        ("Trace summary", M.pairs_md(trace)),
    ]))
    return html_path
