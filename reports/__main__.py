"""``python -m reports RESULT_DIR [RESULT_DIR ...] [--out DIR] [--format png|svg] [--slo S]``.

Each result directory (written by ``simulate.py``) gets its report.html, report.md and plots/;
a sweep directory (holding sweep.parquet) gets the sweep report and a capacity-search
directory (capacity.json, from ``python -m sim.sweep --capacity``) the capacity report;
several result directories also get a comparison report (latency vs rate, waste vs block
size) in ``--out`` or in ``comparison/`` beside them, but only when they differ in sweep axes
alone (checked before anything is written). Prints the path of every report written. A
missing or malformed result file, or runs that cannot be merged: one line on stderr naming
the file or the field, exit code 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports import schema as S
from reports.errors import ReportError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (argparse exits 2 on a bad option)."""
    parser = argparse.ArgumentParser(
        prog="python -m reports", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Plots, report.html and report.md from simulate.py result directories.")
    parser.add_argument("dirs", nargs="+", type=Path, metavar="RESULT_DIR",
                        help="result directory of simulate.py, or a sweep directory")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: beside the results)")
    parser.add_argument("--format", choices=("png", "svg"), default="png", help="image format")
    parser.add_argument("--slo", type=float, default=S.DEFAULT_SLO_S,
                        help="normalised-latency SLO (s/token) that defines capacity in sweeps")
    return parser.parse_args(argv)


def run_out(out: Path | None, source: Path, index: int, many: bool) -> Path | None:
    """Where one run's report goes: beside it, in --out, or in --out/NAME when several."""
    if out is None:
        return None
    return out / f"{index:02d}_{source.resolve().name}" if many else out


def build_one(source: Path, out: Path | None, fmt: str, slo: float) -> list[Path]:
    """The report(s) of one directory: a run, a sweep, a capacity search (or both last)."""
    from reports.build import build_run_report
    from reports.capacity import is_capacity_dir
    from reports.capacity_report import build_capacity
    from reports.sweep_report import build_sweep

    if (source / S.SUMMARY_FILE).is_file():
        return [build_run_report(source, out, fmt)]
    has_sweep = (source / S.SWEEP_FILE).is_file()
    paths = [build_sweep([source], out, fmt, slo)] if has_sweep or not is_capacity_dir(source) \
        else []
    if is_capacity_dir(source):
        paths.append(build_capacity(source, out, fmt, "capacity_report" if has_sweep else "report"))
    return paths


def main(argv: list[str] | None = None) -> int:
    """Build every report; returns the exit code."""
    args = parse_args(argv)
    from reports.merge import check_mergeable
    from reports.sweep_report import build_sweep

    runs = [d for d in args.dirs if (d / S.SUMMARY_FILE).is_file()]
    many = len(args.dirs) > 1
    try:
        check_mergeable(runs)   # before anything is written
        for index, source in enumerate(args.dirs):
            out = run_out(args.out, source, index, many) if many or source in runs else args.out
            for path in build_one(source, out, args.format, args.slo):
                print(path)
        if len(runs) > 1:
            print(build_sweep(runs, args.out, args.format, args.slo))
    except ReportError as exc:
        print(f"python -m reports: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
