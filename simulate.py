"""pagedsim's main job: replay a trace through every KV-cache allocator and compare them.

The one place where the packages meet: ``sim`` simulates (``sim/cli.py`` parses the options,
resolves them and runs every allocator), then ``--report`` builds the report with
``reports.build_report`` and ``--validate`` replays the allocation log on the kernels with
``kernels.validate.main`` (on a shrunk layer when no CUDA device is present). Both are
imported only when asked for (the kernels need torch), so a plain run needs neither. The
results directory is checked first; everything is written into a temporary directory beside
it and renamed into place at the end (``sim/results/rundir.py``); Ctrl-C keeps what finished
(exit status 130). ``--sweep SPEC`` runs a sweep instead (``python -m sim.sweep``).
``python simulate.py --help`` lists every option with its default.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from sim.cli import parse_options, run, workload_source
from sim.config import InputError, Options
from sim.results.rundir import Staging, target_dir
from sim.sweep.run import main_from_simulate

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as a shell reports it."""
CPU_VALIDATE_STEPS = 20
"""--validate without CUDA: attention compared on the first steps (and every step with a
copy, swap, preemption or prefix hit), on a shrunk layer; every step is replayed."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run simulate.py with ``argv``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg == "--sweep" or arg.startswith("--sweep=") for arg in argv):
        return main_from_simulate(argv)
    options = parse_options(argv)
    try:
        target = target_dir(options.out, workload_source(options), options.overwrite)
    except InputError as exc:
        return fail(str(exc), 2)
    staging = Staging(target)
    try:
        return staged(replace(options, out=str(target)), staging)
    except KeyboardInterrupt:
        return interrupted(options, staging)
    finally:
        staging.discard()


def staged(options: Options, staging: Staging) -> int:
    """Simulate, report and validate in the staging directory, then rename it into place."""
    status = run(options, staging)
    if not staging.written():
        return status  # refused before any result was written
    assert staging.path is not None
    if status == 0 and options.report:
        status = report(staging.path, staging.target)
    if status == 0 and options.validate:
        status = validate(staging.path)
    print(f"results: {staging.commit()}", flush=True)
    return status


def interrupted(options: Options, staging: Staging) -> int:
    """Ctrl-C: keep the allocators that finished, say what and where, status 130."""
    if options.progress:  # a progress bar cut short leaves its line open
        print(file=sys.stderr)
    if not staging.written():
        print("simulate.py: interrupted before any allocator finished; nothing written",
              file=sys.stderr)
        return INTERRUPTED
    assert staging.path is not None
    summary = json.loads((staging.path / "summary.json").read_text(encoding="utf-8"))
    names = list(summary["allocators"])
    target = staging.commit()
    what = ("every allocator finished" if summary.get("complete", True) else
            f"finished {len(names)} of {len(options.allocators.split(','))} allocators: "
            f"{', '.join(names)}; summary.json says \"complete\": false")
    print(f"simulate.py: interrupted ({what}); results in {target}", file=sys.stderr)
    return INTERRUPTED


def report(path: Path, target: Path) -> int:
    """--report: reports/ builds report.html and plots/ beside the results (1 on failure).
    They are built in a directory of their own and moved in once complete."""
    try:
        from reports import build_report  # optional here: plotting needs matplotlib
    except ImportError as exc:
        return fail(f"--report needs reports.build_report, which is not available ({exc})")
    scratch = Path(tempfile.mkdtemp(prefix=".report-", dir=path))
    try:
        page = build_report(path, scratch)
        for entry in scratch.iterdir():
            if entry.suffix in (".html", ".md"):  # they name the directory they read
                text = entry.read_text(encoding="utf-8")
                entry.write_text(text.replace(str(path.resolve()), str(target.resolve())),
                                 encoding="utf-8")
            os.replace(entry, path / entry.name)
    except (ValueError, OSError) as exc:
        return fail(f"--report: {exc}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"report: {target / page.name}", flush=True)
    return 0


def validate(path: Path) -> int:
    """--validate: the kernels replay the allocation log (their exit status). Without a
    CUDA device, the CPU path on a shrunk layer as benchmarks/validate_suite.py runs it, with
    torch's paged gathers for attention (the Triton interpreter needs minutes per prefill)."""
    try:
        import torch  # optional: the kernels need it

        from kernels import validate as kernels_validate
    except ImportError as exc:
        return fail(f"--validate needs kernels.validate, which is not available ({exc})")
    args = [str(path / "allocation_log.jsonl.gz")]
    if not torch.cuda.is_available():
        print(f"validate: no CUDA device: block tables replayed on the CPU on a shrunk layer "
              f"(1 KV head x 16, fp32), attention by torch's paged gathers against the float64 "
              f"reference on the first {CPU_VALIDATE_STEPS} steps and every step with a copy, "
              f"swap, preemption or prefix hit; the Triton kernels run with a CUDA device",
              flush=True)
        args += ["--device", "cpu", "--backend", "torch",
                 *kernels_validate.cpu_args(CPU_VALIDATE_STEPS)]
    return int(kernels_validate.main(args) or 0)


def fail(message: str, status: int = 1) -> int:
    """One error line on stderr; returns ``status`` (1: the results are written already)."""
    print(f"simulate.py: error: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
