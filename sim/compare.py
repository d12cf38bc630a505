"""Run one configuration through every allocator, write the result files, print the table.

Each allocator replays the same trace with the same step-time model (``sim/engine.py``).
Results of the allocators that completed are always written, even when a later one breaks
an invariant (that run is reported and the exit status is 1). Files follow
``sim/results/results_schema.json``; each is written atomically.
"""
from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped]

from sim.config import Options, RunConfig
from sim.engine import RunResult, SimulationError, build_costs, replay
from sim.results.alloc_log import AllocationLog
from sim.results.metrics import REQUEST_COLUMNS, STEP_COLUMNS
from sim.results.outputs import (
    SCHEMA_VERSION,
    pagedsim_version,
    provenance,
    write_json,
    write_table,
)
from sim.results.table import comparison_table
from traces import Trace, summarize


def compare(config: RunConfig, options: Options, trace: Trace, trace_sha256: str | None) -> int:
    """Simulate each allocator; write outputs; return the exit status (0, or 1 on a failure)."""
    results: list[RunResult] = []
    status = 0
    costs = build_costs(config)
    log = AllocationLog(config, trace.seed) if config.output.record_log else None
    bar = _progress_bar(config, len(trace))
    try:
        for name in config.allocators:
            try:
                results.append(_run_one(config, trace, costs, name, bar, log))
            except SimulationError as exc:
                fail(str(exc))
                status = 1
    finally:
        if bar is not None:
            bar.close()
        if log is not None:
            log.close()
    write_results(config, options, trace, trace_sha256, results)
    print(comparison_table({r.name: r.summary for r in results}), flush=True)
    return status


def _run_one(config: RunConfig, trace: Trace, costs: Any, name: str, bar: Any,
             log: AllocationLog | None) -> RunResult:
    if bar is not None:
        bar.set_description(name)
    seen = [0]

    def progress(done: int) -> None:
        if done - seen[0] >= 64 or done == len(trace):
            bar.update(done - seen[0])
            seen[0] = done

    writer = log.begin(name) if log is not None else None
    result = replay(name, config, trace, costs, progress=progress if bar is not None else None,
                    log_writer=writer)
    if bar is not None and seen[0] < len(trace):
        bar.update(len(trace) - seen[0])
    return result


def _progress_bar(config: RunConfig, num_requests: int) -> Any:
    if not config.output.progress:
        return None
    return tqdm(total=num_requests * len(config.allocators), unit="req", file=sys.stderr,
                dynamic_ncols=True, mininterval=0.5)


def write_results(config: RunConfig, options: Options, trace: Trace, trace_sha256: str | None,
                  results: list[RunResult]) -> None:
    """summary.json, requests.parquet, steps.parquet, config.json, trace_summary.json."""
    out = config.output.out_dir
    path = config.workload.trace
    trace_info = {"path": path, "sha256": trace_sha256,
                  "format": trace.metadata.format, "num_requests": len(trace)}
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
              "provenance": provenance(config.workload.seed, path, trace_sha256)}
    record.update(config_record(config, options))
    write_json(out / "config.json", record)
    summary = summarize(trace, config.cache.block_size)
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


def config_record(config: RunConfig, options: Options) -> dict[str, Any]:
    """config.json's content (without provenance): the options as given, the scheduler's
    knobs (cache, scheduler, workload and output values, in the file's order), the model,
    GPU, capacity and step model."""
    cache, sched, work = config.cache, config.scheduler, config.workload
    return {
        "options": asdict(options),
        "scheduler": {
            "num_gpu_blocks": cache.num_gpu_blocks, "block_size": cache.block_size,
            "max_model_len": sched.max_model_len, "max_num_seqs": sched.max_num_seqs,
            "max_num_batched_tokens": sched.max_num_batched_tokens,
            "chunked_prefill": sched.chunked_prefill, "prefix_caching": cache.prefix_caching,
            "preemption": sched.preemption, "num_cpu_blocks": cache.num_cpu_blocks,
            "n": work.n, "beam_width": work.beam_width, "sampling_mode": sched.sampling_mode,
            "beam_keep_prob": work.beam_keep_prob, "seed": work.seed, "fast": sched.fast,
            "debug": sched.debug, "record_log": config.output.record_log},
        "model": asdict(config.model),
        "gpu": asdict(config.gpu.spec),
        "capacity": asdict(config.capacity) if config.capacity is not None else None,
        "step_model": config.cost.step_model,
    }


def describe(config: RunConfig, trace: Trace) -> str:
    """The resolved configuration, printed at the start of every run."""
    sched, cache, workload = config.scheduler, config.cache, config.workload
    lines = [
        "pagedsim: resolved configuration",
        (f"  trace: {workload.trace or 'built-in default workload'} ({len(trace)} "
         f"requests, {trace.metadata.span_s:.1f} s, rate x{workload.rate_scale:g})"),
        (f"  model: {config.model.name} ({config.model.dtype}, kv cache "
         f"{cache.kv_cache_dtype}), gpu: {config.gpu.tp} x {config.gpu.spec.name}, "
         f"step model: {config.cost.step_model}"),
        f"  {config.capacity.describe()}" if config.capacity is not None else
        f"  KV cache: {cache.num_gpu_blocks} GPU blocks x {cache.block_size} tokens",
        (f"  scheduler: max_model_len {sched.max_model_len}, max_num_seqs {sched.max_num_seqs}, "
         f"max_num_batched_tokens {sched.max_num_batched_tokens}, chunked prefill "
         f"{'on' if sched.chunked_prefill else 'off'}, prefix caching "
         f"{'on' if cache.prefix_caching else 'off'} ({cache.block_hash} hash), preemption "
         f"{sched.preemption}"),
        (f"  sampling: n {workload.n or 'from trace'}, beam width "
         f"{workload.beam_width or 'from trace'}, mode {sched.sampling_mode} (beam search "
         f"always forks), seed {workload.seed}"),
        (f"  allocators: {', '.join(config.allocators)} (contiguous placement "
         f"{cache.placement})"),
        f"  output: {config.output.out_dir}",
    ]
    if config.model.sliding_window:
        lines.append(f"  sliding window: {config.model.sliding_window} tokens")
    return "\n".join(lines)


def fail(message: str) -> None:
    """Print one error line on stderr."""
    print(f"simulate.py: error: {message}", file=sys.stderr)
