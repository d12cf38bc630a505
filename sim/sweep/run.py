"""``python -m sim.sweep SPEC.toml``: many simulator runs from one spec, locally or on Ray.

Each cell of the spec's grid is an ordinary ``simulate.py`` run in its own directory under
``OUT/cells/``; finished cells are skipped on a re-run, failed ones are recorded and run
again. The merged results go to ``OUT/sweep.parquet`` (one row per cell and allocator, see
sim/sweep/merge.py) and a short table on stdout. ``--capacity`` instead searches, per
allocator, the highest rate_scale meeting a latency SLO (sim/sweep/capacity.py). Exit
status: 0 all cells ran, 1 some failed or the run was cut short, 2 bad spec or options.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]

from sim.config import OPTION_TYPES, OptionError, Options
from sim.sweep import capacity as cs
from sim.sweep.backends import BackendError, CellFn, LocalBackend, RayBackend, default_workers
from sim.sweep.cell import (
    WORKER_CACHE,
    CellRunner,
    CellTask,
    base_rate,
    check_cell,
    execute_cell,
    run_cell,
)
from sim.sweep.merge import merge_rows, render_table, write_parquet
from sim.sweep.spec import CapacitySettings, SpecError, SweepSpec, cell_name, load_spec
from sim.sweep.store import SCHEMA_VERSION, clean_temp, finished, save_record, write_json

DEFAULT_OUT = Path("results") / "sweeps"


@dataclass(slots=True)
class SweepResult:
    """What a grid sweep produced: the merged table and every cell's marker, in cell order."""

    frame: Any
    records: list[dict[str, Any]]
    num_run: int
    num_failed: int


def _progress(enabled: bool, **kwargs: Any) -> Any:
    return tqdm(file=sys.stderr, disable=not enabled, dynamic_ncols=True, **kwargs)


def preflight(spec: SweepSpec, tasks: list[CellTask]) -> None:
    """Resolve every cell about to run (trace loaded once, here); SpecError on the first
    option the simulator refuses, naming the spec key when it can."""
    for task in tasks:
        try:
            check_cell(task.options, WORKER_CACHE)
        except OptionError as exc:
            key = exc.option if exc.option in task.options else None
            if key is None:
                raise SpecError(f"{spec.path}: cell {task.name}: {exc}") from None
            where = f"axes.{key}" if key in spec.axes else f"options.{key}"
            raise SpecError(f"{spec.path}: {where}: {exc}") from None


def run_sweep(spec: SweepSpec, out: Path, backend: Any, *, fn: CellFn = execute_cell,
              runner: CellRunner = run_cell, check: bool | None = None,
              progress: bool = True) -> SweepResult:
    """Run the grid's unfinished cells on ``backend``, then merge every cell.

    Args:
        spec: the parsed spec.
        out: the sweep directory.
        backend: an entered LocalBackend or RayBackend.
        fn: what a worker runs per cell (sim.sweep.cell.execute_cell).
        runner: how a cell runs the simulator (sim.sweep.cell.run_cell; tests swap it).
        check: resolve every cell before running (default: when runner is run_cell).
        progress: show a progress bar over cells on stderr.
    """
    root = out / "cells"
    clean_temp(root)
    cells = spec.cells()
    records: dict[str, dict[str, Any]] = {}
    tasks = []
    for cell in cells:
        options = spec.cell_options(cell)
        record = finished(root, cell.name, options)
        if record is not None:
            records[cell.name] = record
        else:
            tasks.append(CellTask(str(root), cell.name, cell.params, options, runner))
    if check if check is not None else runner is run_cell:
        preflight(spec, tasks)
    write_json(out / "sweep.json", _sweep_record(spec, cells))
    with _progress(progress, total=len(cells), initial=len(records), unit="cell",
                   desc="sweep") as bar:
        for record in backend.run(fn, tasks):
            save_record(root, record)
            records[record["name"]] = record
            bar.update(1)
            if record["status"] != "ok":
                bar.write(f"sweep: cell {record['name']} failed: {record['error']}")
    ordered = [records[c.name] for c in cells]
    frame = write_parquet(out / "sweep.parquet", merge_rows(list(spec.axes), ordered))
    failed = sum(1 for r in ordered if r["status"] != "ok")
    return SweepResult(frame, ordered, len(tasks), failed)


def _sweep_record(spec: SweepSpec, cells: list[Any]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "spec": str(spec.path),
            "description": spec.description, "options": spec.options, "axes": spec.axes,
            "cells": [{"name": c.name, "params": c.params} for c in cells]}


def run_capacity(spec: SweepSpec, settings: CapacitySettings, out: Path, backend: Any, *,
                 fn: CellFn = execute_cell, runner: CellRunner = run_cell,
                 check: bool | None = None, progress: bool = True) -> dict[str, Any]:
    """Search every allocator's capacity; write OUT/capacity.json; return its content."""
    root = out / "capacity"
    clean_temp(root)
    searches = cs.plan_searches(spec, settings, Options().allocators)
    real = check if check is not None else runner is run_cell
    if real:
        first = [s.probe(settings.start) for s in searches]
        preflight(spec, [CellTask(str(root), name, params, options, runner)
                         for name, params, options in first])
    bases = {cell_name(s.params): base_rate(s.options, WORKER_CACHE) if real else None
             for s in searches}
    with _progress(progress, unit="probe", desc="capacity probes") as bar:
        cs.run_searches(searches, root, backend, fn, runner, lambda: bar.update(1))
    axes = [k for k in spec.axes if k not in cs.SEARCH_AXES]
    rows = cs.result_rows(searches, bases)
    ratio_rows = cs.ratios(rows, axes)
    result = {"schema_version": SCHEMA_VERSION, "spec": str(spec.path),
              "settings": dataclasses.asdict(settings), "axes": axes, "searches": rows,
              "ratios": ratio_rows, "text": cs.render(rows, ratio_rows, axes, settings)}
    write_json(out / "capacity.json", result)
    return result


def build_parser() -> argparse.ArgumentParser:
    """The sweep command line."""
    p = argparse.ArgumentParser(prog="python -m sim.sweep",
                                description="Run simulate.py over the grid of a sweep spec, "
                                            "locally or on Ray; --capacity searches each "
                                            "allocator's capacity instead.")
    p.add_argument("spec", help="sweep spec (TOML; see sim/README.md, Sweeps)")
    p.add_argument("--out", default=None,
                   help="sweep directory (default: the spec's 'out', else results/sweeps/SPEC)")
    p.add_argument("--jobs", "--workers", dest="jobs", type=int, default=None,
                   help="worker processes (default: min(CPU count, cells)); with --ray and no "
                        "address, the CPUs of the local Ray instance")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run cells as Ray tasks: on the cluster at ADDRESS, or a local instance "
                        "(write SPEC before --ray, or use --ray=ADDRESS)")
    p.add_argument("--capacity", action="store_true",
                   help="search each allocator's capacity (highest rate_scale meeting the SLO)")
    p.add_argument("--slo", type=float, default=None,
                   help="capacity SLO on the metric, s/token (default: spec, else 0.2)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="relative bisection tolerance (default: spec, else 0.02)")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar on stderr (default: shown)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sweep command; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return _main(args)
    except (SpecError, BackendError) as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        return 2
    except BrokenProcessPool as exc:
        print(f"sweep: a worker process died ({exc}); finished cells are kept, run the same "
              "command again to resume", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sweep: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec, set(OPTION_TYPES))
    overrides = {k: v for k, v in (("slo", args.slo), ("tolerance", args.tolerance))
                 if v is not None}
    try:
        settings = dataclasses.replace(spec.capacity, **overrides)
    except ValueError as exc:
        raise SpecError(f"--slo/--tolerance: {exc}") from None
    if args.jobs is not None and args.jobs < 1:
        raise SpecError(f"--jobs must be >= 1, got {args.jobs}")
    out = Path(args.out) if args.out else spec.out or DEFAULT_OUT / spec.path.stem
    if args.capacity:
        size = len(cs.plan_searches(spec, settings, Options().allocators))
    else:
        size = len(spec.cells())
    backend: Any = (RayBackend(args.ray or None, args.jobs) if args.ray is not None
                    else LocalBackend(args.jobs or default_workers(size)))
    with backend:
        if args.capacity:
            if "rate_scale" in spec.axes:
                print("sweep: --capacity searches rate_scale itself; the rate_scale axis is "
                      "ignored", file=sys.stderr)
            result = run_capacity(spec, settings, out, backend, progress=args.progress)
            print(result["text"])
            print(f"sweep: capacity written to {out / 'capacity.json'}")
            return 1 if any(r["status"] == "failed" for r in result["searches"]) else 0
        sweep = run_sweep(spec, out, backend, progress=args.progress)
    print(render_table(sweep.frame, list(spec.axes)))
    print(f"sweep: {len(sweep.records)} cells ({sweep.num_run} run, "
          f"{len(sweep.records) - sweep.num_run} already done, {sweep.num_failed} failed); "
          f"merged into {out / 'sweep.parquet'}")
    return 1 if sweep.num_failed else 0


def main_from_simulate(argv: Sequence[str]) -> int:
    """``simulate.py --sweep SPEC [sweep options]``: the same as ``python -m sim.sweep``."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg == "--sweep" and i + 1 < len(argv):
            return main([argv[i + 1], *argv[:i], *argv[i + 2:]])
        if arg.startswith("--sweep="):
            return main([arg.split("=", 1)[1], *argv[:i], *argv[i + 1:]])
    return main(argv)


if __name__ == "__main__":
    sys.exit(main())
