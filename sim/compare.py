"""Run one configuration through every allocator, write the result files, print the table.

Each allocator replays the same trace with the same step-time model (``sim/engine.py``) and
is independent of the others, so with ``jobs`` > 1 they run in worker processes (forked where
the platform can: a caller's script is never run again), at most ``jobs`` at a time. Each
replay ends as an ``Outcome``, built in the process that ran it: its summary, its rows as
typed tables and its section of the allocation log. The outcomes are then written in the
configuration's allocator order, so the files are the same whatever ran where. Results of the
allocators that completed are always written, even when another breaks an invariant (that
run is reported and the exit status is 1). Files follow ``sim/results/results_schema.json``;
each is written atomically.
"""
from __future__ import annotations

import multiprocessing
import signal
import sys
import traceback
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped]

from sim.config import Options, RunConfig
from sim.cost.api_path import api_path_of
from sim.engine import build_costs, replay
from sim.results.alloc_log import LogSection, assemble
from sim.results.bench_out import bench_section, goodput_line, json_number, write_bench_json
from sim.results.outputs import (
    SCHEMA_VERSION,
    pagedsim_version,
    provenance,
    typed_table,
    write_json,
    write_tables,
)
from sim.results.rejections import all_rejected, rejection_warnings
from sim.results.rundir import Staging, deferred_interrupt, sticky_interrupt
from sim.results.table import comparison_table
from sim.sched.scheduler import SimulationError
from traces import Trace, summarize

PROGRESS_EVERY = 64
"""Requests that leave between two progress reports of a replay."""
ALL_REJECTED = 2
"""Exit status of a run in which every allocator rejected every request (results written)."""


@dataclass(slots=True)
class Outcome:
    """One allocator's results, or the invariant it broke (``error``)."""

    name: str
    summary: dict[str, Any] | None = None
    counters: dict[str, Any] | None = None
    requests: Any = None
    steps: Any = None
    log_section: str | None = None
    error: str | None = None


def replay_allocator(name: str, config: RunConfig, trace: Trace,
                     progress: Any = None, check: Any = None) -> Outcome:
    """Replay one allocator and turn its records into typed tables (``progress(n)`` is told
    how many requests left since its last call; ``check()``, called as each request
    leaves, may raise to stop the replay)."""
    section = LogSection(config, trace.seed, name) if config.output.record_log else None
    seen = [0]

    def leave(done: int) -> None:
        if check is not None:
            check()
        if progress is not None and (done - seen[0] >= PROGRESS_EVERY or done == len(trace)):
            progress(done - seen[0])
            seen[0] = done
    try:
        result = replay(name, config, trace, build_costs(config),
                        progress=leave if progress is not None or check is not None else None,
                        log_writer=section.writer if section is not None else None)
    except SimulationError as exc:
        return Outcome(name, log_section=section.close() if section else None, error=str(exc))
    if progress is not None and seen[0] < len(trace):
        progress(len(trace) - seen[0])
    log = result.log
    return Outcome(name, result.summary, result.counters,
                   typed_table("requests.parquet", _with_name(name, log.request_columns())),
                   typed_table("steps.parquet", _with_name(name, log.step_columns())),
                   section.close() if section is not None else None)


def _with_name(name: str, columns: dict[str, list[Any]]) -> dict[str, list[Any]]:
    size = len(next(iter(columns.values())))
    return {"allocator": [name] * size, **columns}


def compare(config: RunConfig, options: Options, trace: Trace, trace_sha256: str | None,
            staging: Staging | None = None) -> int:
    """Simulate each allocator; write outputs; return the exit status (0; 1 on a failure; 2
    when every allocator rejected every request).

    Files go to ``staging``'s temporary directory (created here, before anything is
    simulated), else straight to the configured directory. On Ctrl-C the allocators that
    finished are written with ``"complete": false`` and KeyboardInterrupt is raised again.
    """
    if staging is not None:
        config = replace(config, output=replace(config.output, out_dir=staging.open()))
    bar = (tqdm(total=len(trace) * len(config.allocators), unit="req", file=sys.stderr,
                dynamic_ncols=True, mininterval=0.5) if config.output.progress else None)
    finished: dict[str, Outcome] = {}
    interrupted = False
    with sticky_interrupt() as check:
        try:
            if min(config.jobs, len(config.allocators)) > 1:
                _in_workers(config, trace, bar, finished, check)
            else:
                for name in config.allocators:
                    finished[name] = replay_allocator(name, config, trace,
                                                      bar.update if bar else None, check)
                    check()
                    _say_finished(finished[name], bar)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if bar is not None:
                bar.close()
    outcomes = [finished[name] for name in config.allocators if name in finished]
    if interrupted and not outcomes:
        _drop_sections(config.output.out_dir)
        raise KeyboardInterrupt
    status = _report_errors(outcomes)
    with deferred_interrupt():
        warnings, bench = write_results(config, options, trace, trace_sha256, outcomes,
                                        complete=not interrupted)
        if interrupted:
            _drop_sections(config.output.out_dir)
    done = {o.name: o.summary for o in outcomes if o.summary is not None}
    counters = {o.name: o.counters or {} for o in outcomes if o.summary is not None}
    print(comparison_table(done, counters), flush=True)
    if options.goodput:
        print(goodput_line(bench), flush=True)
    for entry in warnings:
        print(f"simulate.py: warning: {entry['message']}", file=sys.stderr)
    if interrupted:
        raise KeyboardInterrupt
    if status == 0 and all_rejected(done):
        cause = warnings[0]["message"].split(": ", 1)[-1] if warnings else "see requests.parquet"
        print(f"simulate.py: error: every allocator rejected every request: {cause}",
              file=sys.stderr)
        return ALL_REJECTED
    return status


def _drop_sections(out: Path) -> None:
    """Remove the log sections of allocators that did not finish (their temporary files)."""
    for section in out.glob(".allocation_log.*"):
        section.unlink(missing_ok=True)


def _report_errors(outcomes: list[Outcome]) -> int:
    status = 0
    for outcome in outcomes:
        if outcome.error is not None:
            print(f"simulate.py: error: {outcome.error}", file=sys.stderr)
            status = 1
    return status


def _say_finished(outcome: Outcome, bar: Any) -> None:
    """With the progress bar: one line as each allocator finishes."""
    if bar is not None:
        wall = outcome.summary["wall_s"] if outcome.summary is not None else None
        tqdm.write(f"{outcome.name} finished" + (f" ({wall:.1f} s)" if wall is not None
                                                  else " (failed)"), file=sys.stderr)


def _in_workers(config: RunConfig, trace: Trace, bar: Any, done: dict[str, Outcome],
                check: Any = None) -> None:
    """Every allocator in its own worker process, ``config.jobs`` at a time; each outcome
    goes into ``done`` as it arrives. Ctrl-C stops the workers (they ignore SIGINT)."""
    methods = multiprocessing.get_all_start_methods()
    context: Any = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    todo = list(config.allocators)
    live: dict[Connection, Any] = {}
    try:
        while todo or live:
            while todo and len(live) < config.jobs:
                ours, theirs = context.Pipe(duplex=False)
                worker = context.Process(target=_worker,
                                         args=(todo.pop(0), config, trace, theirs), daemon=True)
                # CPython ignores a KeyboardInterrupt raised in its after-fork hooks: hold
                # Ctrl-C back until the worker is started and registered
                with deferred_interrupt():
                    worker.start()
                    theirs.close()
                    live[ours] = worker
            for conn in wait(list(live)):
                assert isinstance(conn, Connection)
                _receive(conn, live, bar, done)
                if check is not None:
                    check()
    finally:
        for worker in live.values():
            worker.terminate()
            worker.join()


def _receive(conn: Connection, live: dict[Connection, Any], bar: Any,
             done: dict[str, Outcome]) -> None:
    try:
        kind, value = conn.recv()
    except EOFError:
        kind, value = "crash", f"exit status {live[conn].exitcode}"
    if kind == "progress":
        if bar is not None:
            bar.update(value)
        return
    live.pop(conn).join()
    if kind != "done":
        raise RuntimeError(f"an allocator's worker process failed: {value}")
    done[value.name] = value
    _say_finished(value, bar)


def _worker(name: str, config: RunConfig, trace: Trace, conn: Connection) -> None:
    """A worker process: replay one allocator, send its progress and then its outcome.
    Ctrl-C is the parent's to handle: the worker ignores SIGINT and is stopped by it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        def progress(num: int) -> None:
            conn.send(("progress", num))
        outcome = replay_allocator(name, config, trace,
                                   progress if config.output.progress else None)
        conn.send(("done", outcome))
    except BaseException:  # noqa: BLE001 - the parent reports it and stops
        conn.send(("error", traceback.format_exc().strip().splitlines()[-1]))
    finally:
        conn.close()


def write_results(config: RunConfig, options: Options, trace: Trace, trace_sha256: str | None,
                  outcomes: list[Outcome], complete: bool = True
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """summary.json, requests.parquet, steps.parquet, config.json, trace_summary.json and,
    when recorded, the allocation log; ``complete`` is False when Ctrl-C stopped the run.
    Returns summary.json's warnings (rejected and truncated requests) and its "bench" entry."""
    out = config.output.out_dir
    path = config.workload.trace
    ok = [o for o in outcomes if o.error is None]
    warnings = rejection_warnings(config, {o.name: o.requests for o in ok}, len(trace))
    bench = bench_section(config, options, trace, ok)
    write_json(out / "summary.json", {
        "schema_version": SCHEMA_VERSION, "pagedsim_version": pagedsim_version(),
        "trace": {"path": path, "sha256": trace_sha256, "format": trace.metadata.format,
                  "num_requests": len(trace)},
        "complete": complete,
        "allocators": {o.name: o.summary for o in ok},
        "counters": {o.name: o.counters for o in ok},
        "bench": bench,
        "warnings": warnings,
        "all_rejected": all_rejected({o.name: o.summary for o in ok if o.summary}),
    })
    if options.json:
        write_bench_json(Path(options.json), config, bench)
    write_tables(out / "requests.parquet", "requests.parquet", [o.requests for o in ok])
    write_tables(out / "steps.parquet", "steps.parquet", [o.steps for o in ok])
    record = {"schema_version": SCHEMA_VERSION,
              "provenance": provenance(config.workload.seed, path, trace_sha256)}
    record.update(config_record(config, options))
    write_json(out / "config.json", record)
    summary = summarize(trace, config.cache.block_size)
    write_json(out / "trace_summary.json", {"schema_version": SCHEMA_VERSION, **summary})
    sections = [o.log_section for o in outcomes if o.log_section is not None]
    if config.output.record_log:
        assemble(out, sections)
    return warnings, bench


def config_record(config: RunConfig, options: Options) -> dict[str, Any]:
    """config.json's content (without provenance): the options as given, the scheduler's
    knobs (cache, scheduler, workload and output values, in the file's order), the vLLM
    release profile, the model, GPU, capacity, step model and API path."""
    cache, sched, work = config.cache, config.scheduler, config.workload
    return {
        "options": {k: json_number(v) for k, v in asdict(options).items()},
        "scheduler": {
            "num_gpu_blocks": cache.num_gpu_blocks, "block_size": cache.block_size,
            "max_model_len": sched.max_model_len, "max_num_seqs": sched.max_num_seqs,
            "max_num_batched_tokens": sched.max_num_batched_tokens,
            "chunked_prefill": sched.chunked_prefill, "prefix_caching": cache.prefix_caching,
            "preemption": sched.preemption, "num_cpu_blocks": cache.num_cpu_blocks,
            "n": work.n, "beam_width": work.beam_width, "sampling_mode": sched.sampling_mode,
            "beam_keep_prob": work.beam_keep_prob, "seed": work.seed, "fast": sched.fast,
            "debug": sched.debug, "record_log": config.output.record_log,
            "scheduling_policy": sched.scheduling_policy,
            "long_prefill_token_threshold": sched.long_prefill_token_threshold,
            "max_num_active_seqs": sched.max_num_active_seqs},
        "vllm_profile": sched.vllm_profile.as_dict(),
        "model": asdict(config.model),
        "gpu": asdict(config.gpu.spec),
        "capacity": asdict(config.capacity) if config.capacity is not None else None,
        "step_model": config.cost.step_model,
        "api_path": {**api_path_of(config.cost).as_dict(),
                     "about": "the request's path outside the engine (a prediction)"},
    }
