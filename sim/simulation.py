"""Resolve simulate.py's options, run every allocator, write the results and the table.

``resolve`` turns parsed options into a ``Setup`` (model, GPU, KV capacity, step-time model,
swap cost, trace, scheduler configuration) or raises ``InputError`` with a one-line message;
``run_from_args`` prints the resolved configuration, runs each allocator with a progress bar
on stderr, writes the files of ``sim/results_schema.json`` and prints the comparison table.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sim.cost.capacity import KVCapacity, plan_kv_capacity
from sim.cost.gpus import GpuSpec, make_gpu
from sim.cost.models import ModelConfig, get_model
from sim.options import SchedulerConfig
from sim.cost.step_base import StepModel
from sim.cost.step_model import make_step_model
from sim.cost.swap_cost import SwapCost, make_swap_cost
from traces import Trace, TraceError

DEFAULT_MAX_MODEL_LEN = 4096


class InputError(ValueError):
    """Invalid options or unreadable input: simulate.py prints it and exits with status 2."""


@dataclass(slots=True)
class Setup:
    """Everything a run needs, resolved from the options."""

    args: argparse.Namespace
    model: ModelConfig
    gpu: GpuSpec
    capacity: KVCapacity
    step_model: StepModel
    swap_cost: SwapCost
    trace: Trace
    trace_path: str | None
    trace_sha256: str | None
    config: SchedulerConfig
    allocators: list[str]
    out_dir: Path


def resolve(args: argparse.Namespace) -> Setup:
    """Build the Setup; any bad option or input raises InputError (one line)."""
    try:
        return _resolve(args)
    except (TraceError, OSError) as exc:
        raise InputError(str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc
    except ValueError as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(str(exc).splitlines()[0]) from exc


def _resolve(args: argparse.Namespace) -> Setup:
    from allocator.hashing import get_hash_fn_by_name

    model = get_model(args.model)
    gpu = make_gpu(args.gpu, memory_gib=args.gpu_mem_gib, hbm_gbps=args.gpu_hbm_gbps,
                   tflops=args.gpu_tflops, pcie_gbps=args.gpu_pcie_gbps)
    max_len = args.max_model_len or min(DEFAULT_MAX_MODEL_LEN, model.max_context_len)
    if max_len > model.max_context_len:
        raise InputError(f"--max-model-len {max_len} exceeds {model.name}'s context length "
                         f"{model.max_context_len}")
    if args.rate_scale <= 0:
        raise InputError(f"--rate-scale must be > 0, got {args.rate_scale}")
    if args.block_hash != "fast":
        get_hash_fn_by_name(args.block_hash)
    capacity = plan_kv_capacity(
        model, gpu, block_size=args.block_size, tp=args.tp,
        gpu_memory_utilization=args.gpu_memory_utilization, kv_cache_dtype=args.kv_cache_dtype,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
        num_gpu_blocks_override=args.num_gpu_blocks, swap_space_gib=args.swap_space)
    if args.preemption == "swap" and capacity.num_cpu_blocks == 0:
        raise InputError("--preemption swap needs --swap-space large enough for one block")
    config = SchedulerConfig(
        num_gpu_blocks=capacity.num_gpu_blocks, block_size=args.block_size,
        max_model_len=max_len, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        chunked_prefill=args.chunked_prefill, prefix_caching=args.prefix_caching,
        preemption=args.preemption, num_cpu_blocks=capacity.num_cpu_blocks, n=args.n,
        beam_width=args.beam_width, sampling_mode=args.sampling_mode,
        beam_keep_prob=args.beam_keep_prob, seed=args.seed, fast=args.fast, debug=args.debug,
        record_log=args.record_allocation_log or args.validate)
    step_model = make_step_model(args.step_model, model, gpu, args.tp,
                                 kv_cache_dtype=args.kv_cache_dtype)
    swap_cost = make_swap_cost(model, gpu, args.block_size, tp=args.tp,
                               kv_cache_dtype=args.kv_cache_dtype)
    trace, sha = load_input(args)
    allocators = check_allocators(args.allocators)
    stem = Path(args.trace).name.split(".")[0] if args.trace else "default"
    out_dir = Path(args.out) if args.out else Path("results") / stem
    return Setup(args, model, gpu, capacity, step_model, swap_cost, trace, args.trace, sha,
                 config, allocators, out_dir)


def load_input(args: argparse.Namespace) -> tuple[Trace, str | None]:
    """The trace (or the default workload) after --rate-scale and --limit, and its sha256."""
    from traces import default_workload, limit, load_trace, scale_rate

    if args.trace is None:
        trace, sha = default_workload(seed=args.seed), None
    else:
        trace = load_trace(args.trace, args.format, seed=args.seed)
        sha = trace.metadata.sha256 or file_sha256(Path(args.trace))
    if args.rate_scale != 1.0:
        trace = scale_rate(trace, args.rate_scale)
    if args.limit is not None:
        trace = limit(trace, args.limit)
    if len(trace) == 0:
        raise InputError(f"{args.trace or 'workload'}: no requests to simulate")
    return trace, sha


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_allocators(text: str) -> list[str]:
    """Parse --allocators; every name must build (checked on a tiny pool)."""
    from allocator.interface import ManagerConfig
    from allocator.registry import make_manager

    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise InputError("--allocators is empty")
    if len(set(names)) != len(names):
        raise InputError(f"--allocators lists a name twice: {text}")
    for name in names:
        make_manager(name, ManagerConfig(num_gpu_blocks=4, block_size=16, max_model_len=32))
    return names


def describe(setup: Setup) -> str:
    """The resolved configuration, printed at the start of every run."""
    cfg, args = setup.config, setup.args
    lines = [
        "pagedsim: resolved configuration",
        (f"  trace: {setup.trace_path or 'built-in default workload'} ({len(setup.trace)} "
        f"requests, {setup.trace.metadata.span_s:.1f} s, rate x{args.rate_scale:g})"),
        (f"  model: {setup.model.name} ({setup.model.dtype}, kv cache {args.kv_cache_dtype}), "
        f"gpu: {args.tp} x {setup.gpu.name}, step model: {args.step_model}"),
        f"  {setup.capacity.describe()}",
        (f"  scheduler: max_model_len {cfg.max_model_len}, max_num_seqs {cfg.max_num_seqs}, "
        f"max_num_batched_tokens {cfg.max_num_batched_tokens}, chunked prefill "
        f"{'on' if cfg.chunked_prefill else 'off'}, prefix caching "
        f"{'on' if cfg.prefix_caching else 'off'} ({args.block_hash} hash), preemption "
        f"{cfg.preemption}"),
        (f"  sampling: n {cfg.n or 'from trace'}, beam width {cfg.beam_width or 'from trace'}, "
        f"mode {cfg.sampling_mode} (beam search always forks), seed {cfg.seed}"),
        f"  allocators: {', '.join(setup.allocators)} (contiguous placement {args.placement})",
        f"  output: {setup.out_dir}",
    ]
    if setup.model.sliding_window:
        lines.append(f"  sliding window: {setup.model.sliding_window} tokens")
    return "\n".join(lines)


def run_from_args(args: argparse.Namespace) -> int:
    """The whole run; returns the exit status (InputError propagates for status 2)."""
    from sim.runner import run_all

    setup = resolve(args)
    print(describe(setup), flush=True)
    return run_all(setup)


def config_record(setup: Setup) -> dict[str, Any]:
    """config.json's content (without provenance)."""
    return {
        "options": {k: v for k, v in vars(setup.args).items()},
        "scheduler": asdict(setup.config),
        "model": asdict(setup.model),
        "gpu": asdict(setup.gpu),
        "capacity": asdict(setup.capacity),
        "step_model": setup.args.step_model,
    }


def fail(message: str) -> None:
    """Print one error line on stderr."""
    print(f"simulate.py: error: {message}", file=sys.stderr)
