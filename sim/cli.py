"""Command line of ``simulate.py``: parse options, resolve them into a ``RunConfig``, run.

Flow (Vidur-style thin driver): parse -> ``Options`` -> resolve model, GPU, KV capacity,
step-time model and allocators into a frozen ``RunConfig`` -> load the trace through the
given loader -> print the resolved configuration -> ``sim/compare.py`` runs every allocator,
writes the result files and prints the comparison table. A sweep cell resolves its options
with the same ``resolve``. Invalid options or unreadable inputs print one line on stderr and
exit with status 2; a broken invariant exits with status 1 after the results are written.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import NoReturn

import traces
from allocator.hashing import get_hash_fn_by_name
from allocator.interface import ManagerConfig
from allocator.registry import make_manager
from sim.compare import compare
from sim.config import (
    PLACEMENTS,
    PREEMPTION_MODES,
    SAMPLING_MODES,
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
    HelpFormatter,
    add_convention_options,
    describe_arrivals,
    describe_source,
    workload_spec,
)
from sim.cost.api_path import (
    DEFAULT_API_OUTPUT_MS,
    DEFAULT_API_OVERHEAD_MS,
    DEFAULT_TOKENIZE_US_PER_TOKEN,
    api_path_of,
    resolve_api_path,
)
from sim.cost.capacity import plan_kv_capacity
from sim.cost.gpus import make_gpu
from sim.cost.models import get_model
from sim.engine import build_costs
from sim.listing import print_list
from sim.release import (
    add_release_options,
    describe_release,
    gpu_memory_utilization,
    resolve_profile,
)
from sim.results.bench import check_bench_options
from sim.results.rundir import Staging, default_dir
from sim.sched.spec_rules import check_spec_trace, describe_spec, scheduler_fields
from sim.workload.source import TraceLoader, load_input
from traces import Trace, TraceError

DEFAULT_MAX_MODEL_LEN = 4096
HASH_CHOICES = ("fast", "sha256", "sha256_cbor", "xxhash", "xxhash_cbor", "blake2b")
D = Options()


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> Parser:
    """Every option of simulate.py, with its default in --help (defaults from ``Options``)."""
    p = Parser(prog="simulate.py", formatter_class=HelpFormatter,
               description="Replay a request trace through a SimPy model of an LLM server once "
                           "per KV-cache allocator and compare them.")
    p.add_argument("trace", nargs="?", default=D.trace,
                   help="trace file (Azure, BurstGPT, Mooncake, token-id JSONL, ...); "
                        "omitted: the built-in default workload")
    p.add_argument("--format", default=D.format, help="trace format (default: detected)")
    p.add_argument("--allocators", default=D.allocators,
                   help="comma-separated: paged, paged-nocache, max, pow2, oracle, ft, "
                        "or module:Class")
    p.add_argument("--placement", choices=PLACEMENTS, default=D.placement,
                   help="placement of contiguous regions")
    g = p.add_argument_group("model and GPU")
    g.add_argument("--model", default=D.model, help="model preset or HF config.json path")
    g.add_argument("--kv-cache-dtype", default=D.kv_cache_dtype, help="auto, fp16, bf16 or fp8")
    g.add_argument("--gpu", default=D.gpu, help="GPU preset, or 'custom'")
    g.add_argument("--gpu-mem-gib", type=float, default=D.gpu_mem_gib, help="override GPU memory")
    g.add_argument("--gpu-hbm-gbps", type=float, default=D.gpu_hbm_gbps, help="override HBM GB/s")
    g.add_argument("--gpu-tflops", type=float, default=D.gpu_tflops,
                   help="override dense TFLOP/s")
    g.add_argument("--gpu-pcie-gbps", type=float, default=D.gpu_pcie_gbps,
                   help="override PCIe GB/s")
    g.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int, default=D.tp,
                   help="tensor-parallel degree")
    g.add_argument("--step-model", default=D.step_model,
                   help="auto (fit where a shipped calibration matches, else roofline), "
                   "roofline[:k=v,...], fit[:FILE], calibrated, poly:FILE or table:FILE")
    _timing_options(p.add_argument_group("time outside the GPU steps (step and request)"))
    _cache_options(p.add_argument_group("KV cache and scheduler"))
    _run_options(p.add_argument_group("workload and run"))
    add_release_options(p.add_argument_group("vLLM release and scheduling policy"), D)
    add_convention_options(p)
    _spec_options(p.add_argument_group("speculative decoding and async scheduling"))
    _result_options(p.add_argument_group("results directory"))
    return p


def _timing_options(t: argparse._ArgumentGroup) -> None:
    t.add_argument("--no-tp-comm", dest="tp_comm", action="store_false", default=D.tp_comm,
                   help="leave out tensor-parallel all-reduces (two per layer)")
    t.add_argument("--cpu-overhead-ms", type=float, default=D.cpu_overhead_ms,
                   help="CPU side of a step, ms (default: the step model's, 2 ms)")
    t.add_argument("--cpu-per-seq-us", type=float, default=D.cpu_per_seq_us,
                   help="CPU side per scheduled sequence, us (default: the step model's, 10)")
    t.add_argument("--api-overhead", action=argparse.BooleanOptionalAction,
                   default=D.api_overhead,
                   help="the request's path outside the engine (API server, tokenisation, "
                   "output delivery; default: on for the auto, fit and calibrated step models)")
    t.add_argument("--api-overhead-ms", type=float, default=D.api_overhead_ms,
                   help=f"API server time from send to the waiting queue, ms "
                   f"(default {DEFAULT_API_OVERHEAD_MS:g})")
    t.add_argument("--tokenize-us-per-token", type=float, default=D.tokenize_us_per_token,
                   help=f"tokenisation per prompt token, us (default "
                   f"{DEFAULT_TOKENIZE_US_PER_TOKEN:g})")
    t.add_argument("--api-output-ms", type=float, default=D.api_output_ms,
                   help=f"from a sampled token to the client, ms (default "
                   f"{DEFAULT_API_OUTPUT_MS:g})")


def _result_options(r: argparse._ArgumentGroup) -> None:
    r.add_argument("--overwrite", action="store_true",
                   help="replace an --out directory that exists and is not empty")


def _cache_options(c: argparse._ArgumentGroup) -> None:
    c.add_argument("--block-size", type=int, default=D.block_size, help="tokens per block")
    c.add_argument("--num-gpu-blocks", "--num-gpu-blocks-override", dest="num_gpu_blocks",
                   type=int, default=D.num_gpu_blocks,
                   help="override the computed pool size (as printed by vLLM)")
    c.add_argument("--gpu-memory-utilization", type=float, default=D.gpu_memory_utilization,
                   help="fraction of GPU memory vLLM may use (default: the release's, 0.9; "
                        "0.92 from 0.20)")
    c.add_argument("--max-num-seqs", type=int, default=D.max_num_seqs,
                   help="most sequences running at once")
    c.add_argument("--max-num-batched-tokens", type=int, default=D.max_num_batched_tokens,
                   help="token budget of one step")
    c.add_argument("--max-model-len", type=int, default=D.max_model_len,
                   help="longest sequence (default 4096, capped at the model's context)")
    c.add_argument("--chunked-prefill", "--enable-chunked-prefill", dest="chunked_prefill",
                   action=argparse.BooleanOptionalAction,
                   default=D.chunked_prefill, help="split long prefills over steps")
    c.add_argument("--prefix-caching", "--enable-prefix-caching", dest="prefix_caching",
                   action=argparse.BooleanOptionalAction,
                   default=D.prefix_caching, help="prefix caching for the paged allocator")
    c.add_argument("--preemption", choices=PREEMPTION_MODES, default=D.preemption,
                   help="how a preempted request gives back its blocks")
    c.add_argument("--swap-space", type=float, default=D.swap_space,
                   help="CPU swap space per GPU, GiB")
    c.add_argument("--n", type=int, default=D.n,
                   help="parallel samples per request (default: the trace's, else 1)")
    c.add_argument("--beam-width", type=int, default=D.beam_width,
                   help="beam width (default: the trace's, else 1)")
    c.add_argument("--sampling-mode", choices=SAMPLING_MODES, default=D.sampling_mode,
                   help="n > 1: one prefill then fork (cow) or n independent requests")
    c.add_argument("--beam-keep-prob", type=float, default=D.beam_keep_prob,
                   help="beam model: chance a new beam keeps its own parent")
    c.add_argument("--block-hash", "--prefix-caching-hash-algo", dest="block_hash",
                   default=D.block_hash, choices=HASH_CHOICES,
                   help="prefix-cache block hash: fast (hits identical to sha256), vLLM's "
                        "sha256, sha256_cbor, xxhash, xxhash_cbor, or blake2b")


def _run_options(w: argparse._ArgumentGroup) -> None:
    w.add_argument("--rate-scale", type=float, default=D.rate_scale,
                   help="replay at X times the rate")
    w.add_argument("--limit", type=int, default=D.limit, help="first N requests only")
    w.add_argument("--seed", type=int, default=D.seed,
                   help="seed for datasets, arrivals, token ids and the beam model")
    w.add_argument("--jobs", type=int, default=D.jobs,
                   help="worker processes, one allocator each (default: the CPU count; "
                        "1: all in this process)")
    w.add_argument("--out", default=D.out, help="output directory (default results/<trace>)")
    w.add_argument("--record-allocation-log", action="store_true",
                   help="write allocation_log.jsonl.gz (reference loop; for GPU validation)")
    w.add_argument("--debug", action="store_true",
                   help="check invariants (and the fast snapshot) after every step")
    w.add_argument("--no-fast", dest="fast", action="store_false",
                   help="use the reference loop everywhere (same results, slower)")
    w.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar on stderr")
    w.add_argument("--report", action="store_true", help="build the report (reports/) after")
    w.add_argument("--validate", action="store_true",
                   help="replay the allocation log on GPU kernels (kernels/) after")
    w.add_argument("--sweep", metavar="SPEC", default=D.sweep,
                   help="run the sweep SPEC.toml instead (same as python -m sim.sweep SPEC)")


def _spec_options(s: argparse._ArgumentGroup) -> None:
    s.add_argument("--speculative-config", metavar="JSON", default=D.speculative_config,
                   help='speculative decoding as vLLM spells it: {"method": "ngram"|"eagle"|'
                        '"draft_model", "num_speculative_tokens": K[, "model": DRAFT]}')
    s.add_argument("--acceptance-rate", metavar="A[,A2,...]", default=D.acceptance_rate,
                   help="chance a draft token is accepted, one for every position or K "
                        "(default 0.7)")
    s.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction,
                   default=D.async_scheduling,
                   help="schedule the next step while one runs (default: the vLLM release's "
                        "rule)")


def parse_options(argv: Sequence[str]) -> Options:
    """``Options`` from simulate.py's argv; a bad value exits with one line and status 2."""
    parser = build_parser()
    namespace = parser.parse_args(list(argv))
    if namespace.list is not None:
        print_list(namespace.list)
        parser.exit(0)
    try:
        return Options(**{f.name: getattr(namespace, f.name) for f in fields(Options)})
    except InputError as exc:
        parser.error(str(exc))


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
