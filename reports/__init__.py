"""pagedsim reports: plots, an HTML page and a Markdown summary from simulator result files.

Reads only the files ``simulate.py`` writes (summary.json, steps.parquet, requests.parquet,
config.json, trace_summary.json; described column by column in sim/results/results_schema.json; a
sweep's sweep.parquet; a capacity search's capacity.json) and never imports ``sim``.
``build_report(result_dir)`` writes report.html, report.md and one image per figure beside the
results; ``python -m reports DIR ...`` does the same from a shell.
Importing this package is cheap: matplotlib and pandas load on the first report.
"""
from __future__ import annotations

from pathlib import Path

from reports.errors import ReportError

__all__ = ["ReportError", "build_capacity_report", "build_report", "build_sweep_report"]


def build_report(result_dir: str | Path, out_dir: str | Path | None = None,
                 fmt: str = "png") -> Path:
    """Write the report of one run; returns the path of its report.html.

    Args:
        result_dir: a directory written by ``simulate.py``.
        out_dir: where to write (default: ``result_dir`` itself).
        fmt: image format, "png" or "svg".

    Raises:
        ReportError: a result file is missing or malformed (the message names it).
    """
    from reports.build import build_run_report

    return build_run_report(Path(result_dir), None if out_dir is None else Path(out_dir), fmt)


def build_sweep_report(sources: list[str | Path], out_dir: str | Path | None = None,
                       fmt: str = "png", slo: float | None = None) -> Path:
    """Write the sweep report (Fig. 12 and Fig. 18b shapes); returns its report.html.

    Args:
        sources: one sweep directory holding sweep.parquet, or several result directories.
        out_dir: where to write (default: the sweep directory, or a ``comparison`` directory
            beside the result directories).
        fmt: image format, "png" or "svg".
        slo: normalised-latency limit (s/token) that defines capacity (default 0.2).

    Raises:
        ReportError: a source is missing or malformed (the message names it).
    """
    from reports.sweep_report import build_sweep

    return build_sweep([Path(s) for s in sources], None if out_dir is None else Path(out_dir),
                       fmt, slo)


def build_capacity_report(search_dir: str | Path, out_dir: str | Path | None = None,
                          fmt: str = "png") -> Path:
    """Write the report of a capacity search (``python -m sim.sweep --capacity``); returns
    its report.html.

    Raises:
        ReportError: capacity.json is missing or malformed (the message names it).
    """
    from reports.capacity_report import build_capacity

    return build_capacity(Path(search_dir), None if out_dir is None else Path(out_dir), fmt)
