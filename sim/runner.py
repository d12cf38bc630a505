"""Run every allocator of a resolved setup, write the result files, print the comparison.

Results of the allocators that completed are always written, even when a later one breaks an
invariant (that run is reported and the exit status is 1). ``--report`` and ``--validate``
import ``reports`` and ``kernels`` only here, lazily, so ``sim`` never depends on them.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from sim.results.alloc_log import AllocationLog
from sim.results.metrics import REQUEST_COLUMNS, STEP_COLUMNS
from sim.results.outputs import SCHEMA_VERSION, pagedsim_version, provenance, write_json, write_table
from sim.run import RunResult, SimulationError, run_allocator
from sim.simulation import config_record, fail
from sim.results.table import comparison_table

if TYPE_CHECKING:
    from sim.simulation import Setup


def run_all(setup: Setup) -> int:
    """Simulate each allocator; write outputs; return the exit status."""
    results: list[RunResult] = []
    status = 0
    log = AllocationLog(setup) if setup.config.record_log else None
    bar = _progress_bar(setup)
    try:
        for name in setup.allocators:
            try:
                results.append(_run_one(setup, name, bar, log))
            except SimulationError as exc:
                fail(str(exc))
                status = 1
    finally:
        if bar is not None:
            bar.close()
        if log is not None:
            log.close()
    write_results(setup, results)
    print(comparison_table(results), flush=True)
    if status == 0:
        status = _post_actions(setup)
    return status


def _run_one(setup: Setup, name: str, bar: Any, log: AllocationLog | None) -> RunResult:
    if bar is not None:
        bar.set_description(name)
    seen = [0]

    def progress(done: int) -> None:
        if done - seen[0] >= 64 or done == len(setup.trace):
            bar.update(done - seen[0])
            seen[0] = done

    writer = log.begin(name) if log is not None else None
    result = run_allocator(
        name, setup.trace, setup.config, setup.step_model, setup.swap_cost.time_s,
        placement=setup.args.placement, sliding_window=setup.model.sliding_window,
        block_hash=setup.args.block_hash, progress=progress if bar is not None else None,
        log_writer=writer)
    if bar is not None and seen[0] < len(setup.trace):
        bar.update(len(setup.trace) - seen[0])
    return result


def _progress_bar(setup: Setup) -> Any:
    if not setup.args.progress:
        return None
    from tqdm import tqdm  # type: ignore[import-untyped]

    return tqdm(total=len(setup.trace) * len(setup.allocators), unit="req", file=sys.stderr,
                dynamic_ncols=True, mininterval=0.5)


def write_results(setup: Setup, results: list[RunResult]) -> None:
    """summary.json, requests.parquet, steps.parquet, config.json, trace_summary.json."""
    from traces import summarize

    out = setup.out_dir
    trace_info = {"path": setup.trace_path, "sha256": setup.trace_sha256,
                  "format": setup.trace.metadata.format, "num_requests": len(setup.trace)}
    write_json(out / "summary.json", {
        "schema_version": SCHEMA_VERSION, "pagedsim_version": pagedsim_version(),
        "trace": trace_info,
        "allocators": {r.name: r.summary for r in results},
        "counters": {r.name: r.counters for r in results},
    })
    write_table(out / "requests.parquet", "requests.parquet",
                _stack(results, REQUEST_COLUMNS, lambda r: r.log.request_columns()))
    write_table(out / "steps.parquet", "steps.parquet",
                _stack(results, STEP_COLUMNS, lambda r: r.log.step_columns()))
    record = {"schema_version": SCHEMA_VERSION,
              "provenance": provenance(setup.args.seed, setup.trace_path, setup.trace_sha256)}
    record.update(config_record(setup))
    write_json(out / "config.json", record)
    summary = summarize(setup.trace, setup.config.block_size)
    write_json(out / "trace_summary.json", {"schema_version": SCHEMA_VERSION, **summary})


def _stack(results: list[RunResult], names: tuple[str, ...], get: Any) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {"allocator": []}
    columns.update({name: [] for name in names})
    for result in results:
        cols = get(result)
        size = len(cols[names[0]])
        columns["allocator"].extend([result.name] * size)
        for name in names:
            columns[name].extend(cols[name])
    return columns


def _post_actions(setup: Setup) -> int:
    """--report and --validate, each imported lazily; a missing module is one clear error."""
    status = 0
    if setup.args.report:
        try:
            from reports import build_report  # type: ignore[attr-defined]
        except ImportError as exc:
            fail(f"--report needs reports.build_report, which is not available ({exc})")
            status = 1
        else:
            try:
                print(f"report: {build_report(setup.out_dir)}", flush=True)
            except (ValueError, OSError) as exc:
                fail(f"--report: {exc}")
                status = 1
    if setup.args.validate:
        try:
            from kernels import validate  # type: ignore[attr-defined]
        except ImportError as exc:
            fail(f"--validate needs kernels.validate, which is not available ({exc})")
            status = 1
        else:
            code = validate.main([str(setup.out_dir / "allocation_log.jsonl.gz")])
            status = status or int(code or 0)
    return status
