"""pagedsim's main job: replay a trace through every KV-cache allocator and compare them.

The one place where the packages meet: ``sim`` simulates (``sim/cli.py`` parses the options,
resolves them and runs every allocator), then ``--report`` builds the report with
``reports.build_report`` and ``--validate`` replays the allocation log on the kernels with
``kernels.validate.main``. Both are imported only when asked for (the kernels need torch), so
a plain run needs neither. ``--sweep SPEC`` runs a sweep instead (``python -m sim.sweep``).
``python simulate.py --help`` lists every option with its default.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

from sim.cli import out_dir, parse_options, run
from sim.config import Options
from sim.sweep.run import main_from_simulate


def main(argv: Sequence[str] | None = None) -> int:
    """Run simulate.py with ``argv``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg == "--sweep" or arg.startswith("--sweep=") for arg in argv):
        return main_from_simulate(argv)
    options = parse_options(argv)
    status = run(options)
    if status == 0 and options.report:
        status = report(options)
    if status == 0 and options.validate:
        status = validate(options)
    return status


def report(options: Options) -> int:
    """--report: reports/ builds report.html beside the results (1 on failure)."""
    try:
        from reports import build_report  # optional here: plotting needs matplotlib
    except ImportError as exc:
        return fail(f"--report needs reports.build_report, which is not available ({exc})")
    try:
        print(f"report: {build_report(out_dir(options))}", flush=True)
    except (ValueError, OSError) as exc:
        return fail(f"--report: {exc}")
    return 0


def validate(options: Options) -> int:
    """--validate: the kernels replay the allocation log (their exit status)."""
    try:
        from kernels import validate as kernels_validate  # optional: needs torch
    except ImportError as exc:
        return fail(f"--validate needs kernels.validate, which is not available ({exc})")
    return int(kernels_validate.main([str(out_dir(options) / "allocation_log.jsonl.gz")]) or 0)


def fail(message: str) -> int:
    """One error line on stderr; exit status 1 (the results are written already)."""
    print(f"simulate.py: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
