"""Command line of ``simulate.py``: parse options, resolve them into a ``RunConfig``, run.

Flow (Vidur-style thin driver): parse -> ``Options`` -> resolve model, GPU, KV capacity,
step-time model and allocators into a frozen ``RunConfig`` -> load the trace through the
given loader -> print the resolved configuration -> ``sim/compare.py`` runs every allocator,
writes the result files and prints the comparison table. A sweep cell resolves its options
with the same ``resolve``. Invalid options or unreadable inputs print one line on stderr and
exit with status 2; a broken invariant exits with status 1 after the results are written.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import traces
from allocator.hashing import get_hash_fn_by_name
from allocator.interface import ManagerConfig
from allocator.registry import make_manager
from sim.cli_args import DEFAULT_MAX_MODEL_LEN, parse_options
from sim.compare import compare
from sim.config import (
    CacheConfig,
    CostConfig,
    GpuConfig,
    InputError,
    Options,
    OutputConfig,
    RunConfig,
    SchedulerConfig,
    WorkloadConfig,
)
from sim.conventions import (
    describe_arrivals,
    describe_source,
    workload_spec,
)
from sim.cost.api_path import (
    api_path_of,
    resolve_api_path,
)
from sim.cost.capacity import plan_kv_capacity
from sim.cost.gpus import make_gpu
from sim.cost.models import get_model
from sim.engine import build_costs
from sim.release import (
    describe_release,
    gpu_memory_utilization,
    resolve_profile,
)
from sim.results.bench import check_bench_options
from sim.results.rundir import Staging, default_dir
from sim.sched.spec_rules import check_spec_trace, describe_spec, scheduler_fields
from sim.workload.source import TraceLoader, load_input
from traces import Trace, TraceError


def out_dir(options: Options) -> Path:
    """``--out``, else ``results/<stem>`` of the trace, the dataset file or the dataset name
    (``results/default`` for the built-in workload)."""
    if options.out:
        return Path(options.out)
    return default_dir(workload_source(options))


def workload_source(options: Options) -> str | None:
    """What names the default results directory: the trace, dataset file or dataset name."""
    return options.trace or options.dataset_path or options.dataset_name


def resolve(options: Options) -> RunConfig:
    """The run's configuration; any refused option or input raises InputError (one line)."""
    try:
        return _resolve(options)
    except InputError:
        raise
    except (TraceError, OSError, ValueError) as exc:
        raise InputError(str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc


def _resolve(o: Options) -> RunConfig:
    model = get_model(o.model)
    gpu = make_gpu(o.gpu, memory_gib=o.gpu_mem_gib, hbm_gbps=o.gpu_hbm_gbps,
                   tflops=o.gpu_tflops, pcie_gbps=o.gpu_pcie_gbps)
    if o.block_hash != "fast":
        get_hash_fn_by_name(o.block_hash)
    profile = resolve_profile(o.vllm_version, o.vllm_overrides)
    check_bench_options(o)
    capacity = plan_kv_capacity(
        model, gpu, block_size=o.block_size, tp=o.tp,
        gpu_memory_utilization=gpu_memory_utilization(o.gpu_memory_utilization, profile),
        kv_cache_dtype=o.kv_cache_dtype,
        max_num_batched_tokens=o.max_num_batched_tokens, max_num_seqs=o.max_num_seqs,
        num_gpu_blocks_override=o.num_gpu_blocks, swap_space_gib=o.swap_space)
    config = RunConfig(
        model=model, gpu=GpuConfig(gpu, o.tp),
        cache=CacheConfig(capacity.num_gpu_blocks, o.block_size, capacity.num_cpu_blocks,
                          o.kv_cache_dtype, o.prefix_caching, o.block_hash, o.placement),
        scheduler=SchedulerConfig(
            o.max_model_len or min(DEFAULT_MAX_MODEL_LEN, model.max_context_len),
            o.max_num_seqs, o.max_num_batched_tokens, o.chunked_prefill, o.preemption,
            o.sampling_mode, o.fast, o.debug, profile, o.scheduling_policy,
            o.long_prefill_token_threshold, o.max_num_active_seqs,
            **scheduler_fields(o)),
        workload=WorkloadConfig(o.trace, o.format, o.rate_scale, o.limit, o.seed, o.n,
                                o.beam_width, o.beam_keep_prob, workload_spec(o),
                                o.max_concurrency),
        output=OutputConfig(out_dir(o), o.record_allocation_log or o.validate, o.progress),
        cost=CostConfig(o.step_model, o.tp_comm, o.cpu_overhead_ms, o.cpu_per_seq_us,
                        **resolve_api_path(o.step_model, o.api_overhead, o.api_overhead_ms,
                                           o.tokenize_us_per_token, o.api_output_ms).as_dict()),
        allocators=check_allocators(o.allocators),
        jobs=o.jobs or os.cpu_count() or 1, capacity=capacity)
    build_costs(config)  # the step-time model's spec and files are checked here, once
    return config


def check_allocators(text: str) -> tuple[str, ...]:
    """Parse --allocators; every name must build (checked on a tiny pool)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise InputError("--allocators is empty")
    if len(set(names)) != len(names):
        raise InputError(f"--allocators lists a name twice: {text}")
    for name in names:
        make_manager(name, ManagerConfig(num_gpu_blocks=4, block_size=16, max_model_len=32))
    return tuple(names)


def describe(config: RunConfig, trace: Trace) -> str:
    """The resolved configuration, printed at the start of every run."""
    sched, cache, workload = config.scheduler, config.cache, config.workload
    lines = [
        "pagedsim: resolved configuration",
        (f"  trace: {describe_source(workload)} ({len(trace)} "
         f"requests, {trace.metadata.span_s:.1f} s, rate x{workload.rate_scale:g})"),
        (f"  model: {config.model.name} ({config.model.dtype}, kv cache "
         f"{cache.kv_cache_dtype}), gpu: {config.gpu.tp} x {config.gpu.spec.name}, "
         f"step model: {config.cost.step_model}"),
        (f"  step model used: {build_costs(config).step_model.description}; "
         f"{api_path_of(config.cost).describe()}"),
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
        describe_release(sched.vllm_profile, sched.scheduling_policy,
                         sched.long_prefill_token_threshold, sched.max_num_active_seqs),
    ]
    if describe_arrivals(workload) is not None:
        lines.insert(2, str(describe_arrivals(workload)))
    if config.model.sliding_window:
        lines.append(f"  sliding window: {config.model.sliding_window} tokens")
    lines.append(describe_spec(sched))
    return "\n".join(lines)


def run_options(options: Options, loader: TraceLoader = traces,
                staging: Staging | None = None) -> int:
    """Resolve, load the trace, print the configuration and compare every allocator (the
    files go to ``staging``'s temporary directory when given, see sim/results/rundir.py).

    Returns the exit status; InputError propagates (status 2 for the caller to give).
    """
    config = resolve(options)
    try:
        trace, sha = load_input(config.workload, loader)
    except (TraceError, OSError) as exc:
        raise InputError(str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc
    check_spec_trace(config, trace)
    print(describe(config, trace), flush=True)
    return compare(config, options, trace, sha, staging)


def run(options: Options, staging: Staging | None = None) -> int:
    """``run_options`` for the command line: a refused option or input is one line on
    stderr and exit status 2."""
    try:
        return run_options(options, staging=staging)
    except InputError as exc:
        print(f"simulate.py: error: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Simulate with simulate.py's ``argv`` (``simulate.py`` itself adds ``--report``,
    ``--validate`` and ``--sweep``); returns the exit status."""
    return run(parse_options(sys.argv[1:] if argv is None else argv))
