"""Replay an allocation log through the Triton kernels on real tensors and check every output.

`python -m kernels.validate ALLOCATION_LOG [--device cuda|cpu] [--steps all|N]
[--allocator NAME]` reads the log `simulate.py --record-allocation-log` writes, and for each
paged allocator section replays every step on one attention layer (real head layout and
dtype, see kernels/validate/kv_content.py): slot check, copies and swaps, K/V writes through the
logged slots, then decode / prefill attention compared with a float64 reference over each
sequence's own tokens. `--steps N` compares attention on the first N steps and on every later
step with a copy, swap, preemption or prefix hit; the other steps still run their copies,
swaps and writes, so the cache is always exact. Exit 0: all passed; 1: a mismatch (or the
K/V caches of all layers do not fit the GPU); 2: bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernels.testing import TOLERANCE
from kernels.validate import attn
from kernels.validate.log import LogError, LogHeader, StepRecord, iter_log, selected
from kernels.validate.mutate import Mutation, Mutator
from kernels.validate.ops import ValidationError, after_step, apply_moves, check_slots, write_tokens
from kernels.validate.report import SectionResult, finish_timing, format_section
from kernels.validate.setup import Layout, make_replay

CPU_SHRINK: dict[str, Any] = {"dtype": "fp32", "max_kv_heads": 1, "head_dim": 16}
"""The shrunk layer of a validation on the CPU (1 KV head x 16, fp32): the Triton
interpreter runs the real layer's kernels far too slowly."""


def cpu_args(steps: int) -> list[str]:
    """``main``'s arguments for a CPU validation on the shrunk layer, comparing attention on
    the first ``steps`` steps (and every step with a copy, swap, preemption or prefix hit)."""
    return ["--steps", str(steps), "--dtype", CPU_SHRINK["dtype"], "--max-kv-heads",
            str(CPU_SHRINK["max_kv_heads"]), "--head-dim", str(CPU_SHRINK["head_dim"])]


@dataclass(slots=True)
class Options:
    """How to validate; the CLI fills it, tests set fields directly."""

    device: str = "cpu"
    steps: int | None = None
    allocator: str | None = None
    dtype: str | None = None
    max_kv_heads: int | None = None
    head_dim: int | None = None
    check_slots: bool = True
    timing: bool = True
    timing_reps: int = 5
    mutation: Mutation | None = None
    backend: str = "triton"
    poison: bool = True
    verbose: bool = False
    sections: list[str] = field(default_factory=list)


def _validate_step(rp: Any, hdr: LogHeader, rec: StepRecord, compare: bool, res: SectionResult,
                   opts: Options, mutator: Mutator | None) -> None:
    window = hdr.sliding_window
    if mutator is not None and compare:
        mutator.before_moves(rec, hdr.block_size)
    if opts.check_slots:
        check_slots(hdr, rec, 0 if rp.k_cpu is None else rp.k_cpu.shape[0])
    apply_moves(rp, rec)
    write_tokens(rp, rec, window)
    if compare:
        if mutator is not None:
            mutator.before_attention(rp, rec, window)
        rp.flush()
        batch = attn.build_batch(rp, rec, window)
        tensors = attn.prepare(rp, batch)
        run = attn.run_kernels if opts.backend == "triton" else attn.run_torch
        outs = run(rp, batch, tensors, window)
        refs = attn.reference_batch(rp, rec, batch, window)
        err = attn.compare(rp, rec, batch, outs, refs, res.tolerance, window)
        measured = None
        if res.timed:
            measured, method = attn.time_step(rp, batch, tensors, window, opts.timing_reps)
            res.timing_methods[method] = res.timing_methods.get(method, 0) + 1
        res.add_step(rec, err, len(rec.seqs), measured)
    after_step(rp, rec)


def tolerance(dtype: torch.dtype, kv_cache_dtype: str | None) -> float:
    """The error bound of a section: the dtype's, or for an fp8 cache at least fp16's (the
    kernels widen e4m3 to fp16 and run the dots in fp16, queries included)."""
    if kv_cache_dtype:
        return max(TOLERANCE[dtype], TOLERANCE[torch.float16])
    return TOLERANCE[dtype]


def validate_section(hdr: LogHeader, records: Any, opts: Options) -> SectionResult:
    """Replay one allocator section; stops at the first mismatch (recorded in the result)."""
    layout = Layout.from_header(hdr, opts.dtype, opts.max_kv_heads, opts.head_dim)
    device = torch.device(opts.device)
    rp, memory = make_replay(hdr, layout, device, opts.poison)
    dtype = layout.dtype
    name = str(dtype).replace("torch.", "") + (", kv cache fp8_e4m3" if hdr.kv_cache_dtype else "")
    res = SectionResult(hdr.allocator, hdr.model_name, name,
                        asdict(layout.summary()), tolerance(dtype, hdr.kv_cache_dtype), memory,
                        timed=(opts.timing and device.type == "cuda" and layout.real
                               and opts.backend == "triton"))
    res.num_layers = hdr.num_layers
    res.backend = opts.backend
    mutator = Mutator(opts.mutation) if opts.mutation is not None else None
    try:
        for index, rec in enumerate(records):
            compare = selected(rec, index, opts.steps)
            res.num_steps += 1
            _validate_step(rp, hdr, rec, compare, res, opts, mutator)
            if opts.verbose and compare:
                print(f"  step {rec.step}: {len(rec.seqs)} seqs, max error "
                      f"{res.per_step[-1]['max_error']:.3g}", file=sys.stderr)
    except ValidationError as exc:
        res.failure = str(exc)
        res.failure_kind = exc.kind
    res.unverified_tokens = rp.unverified_tokens
    if mutator is not None:
        res.mutation = mutator.applied
        if mutator.applied is None and res.failure is None:
            raise LogError(f"mutation {mutator.mutation.kind}: only {mutator.seen} eligible "
                           f"steps, needed {mutator.target + 1} (lower 'within')")
    finish_timing(res)
    del rp
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return res


def _sections(path: Path, opts: Options) -> Any:
    """(header, step iterator) per allocator section chosen by `opts.allocator`."""
    items = iter_log(path)
    pending: list[Any] = []

    def steps() -> Any:
        for item in items:
            if isinstance(item, LogHeader):
                pending.append(item)
                return
            yield item

    for item in items:
        pending.append(item)
        while pending:
            hdr = pending.pop()
            want = hdr.allocator == opts.allocator if opts.allocator else hdr.paged
            if want and not hdr.paged:
                raise LogError(f"{path}:{hdr.line}: allocator {hdr.allocator!r} is contiguous "
                               "(tables are [start, end] slot ranges); only paged allocators "
                               "are validated")
            it = steps()
            if want:
                yield hdr, it
            for _ in it:
                pass


def validate_log(path: str | Path, opts: Options) -> list[SectionResult]:
    """Validate every chosen section of the log at `path`.

    Raises:
        LogError: unreadable log, bad field, or no section to validate.
    """
    results = []
    for hdr, records in _sections(Path(path), opts):
        results.append(validate_section(hdr, records, opts))
        if results[-1].failure:
            break
    if not results:
        raise LogError(f"{path}: no paged allocator section"
                       + (f" named {opts.allocator!r}" if opts.allocator else ""))
    return results


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kernels.validate", description=__doc__.split(
        "\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("log", help="allocation_log.jsonl.gz written by simulate.py")
    p.add_argument("--device", choices=("cuda", "cpu"),
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", default="all", help="'all', or N: the first N steps plus every "
                   "step with a copy, swap, preemption or prefix hit")
    p.add_argument("--allocator", help="validate only this allocator's section")
    p.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), help="override the log's dtype")
    p.add_argument("--max-kv-heads", type=int, help="shrink KV heads (keeps the GQA ratio)")
    p.add_argument("--head-dim", type=int, help="shrink the head size (power of two >= 16)")
    p.add_argument("--no-slot-check", action="store_true",
                   help="skip the structural slot-mapping check")
    p.add_argument("--no-timing", action="store_true", help="skip the CUDA timing cross-check")
    p.add_argument("--mutate", help="KIND[:SEED[:WITHIN]], KIND table, copy or slot (tests)")
    p.add_argument("--backend", choices=("triton", "torch"), default="triton",
                   help="attention by the Triton kernels, or by kernels/reference.py's "
                   "float64 block-table gathers (fast CPU checks of big logs)")
    p.add_argument("--no-poison", action="store_true",
                   help="fill unwritten cache rows with zeros instead of NaN")
    p.add_argument("--report", help="write the results as JSON to this file")
    p.add_argument("-v", "--verbose", action="store_true", help="print every validated step")
    return p.parse_args(argv)


def _options(args: argparse.Namespace) -> Options:
    if args.steps != "all" and (not args.steps.isdigit()):
        raise LogError(f"--steps {args.steps!r}: expected 'all' or a count")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise LogError("--device cuda: no CUDA device is available")
    return Options(device=args.device, steps=None if args.steps == "all" else int(args.steps),
                   allocator=args.allocator, dtype=args.dtype, max_kv_heads=args.max_kv_heads,
                   head_dim=args.head_dim, check_slots=not args.no_slot_check,
                   timing=not args.no_timing,
                   mutation=Mutation.parse(args.mutate) if args.mutate else None,
                   backend=args.backend, poison=not args.no_poison, verbose=args.verbose)


def write_report(path: str | Path, log: str | Path, results: list[SectionResult]) -> None:
    """The results as JSON, written atomically."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump({"log": str(log), "sections": [r.to_json() for r in results]}, fh, indent=1)
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 pass, 1 mismatch, 2 bad input)."""
    args = _parse_args(argv)
    try:
        opts = _options(args)
        results = validate_log(args.log, opts)
    except (LogError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for res in results:
        print(format_section(res, opts.device))
    if args.report:
        write_report(args.report, args.log, results)
    return 1 if any(r.failed for r in results) else 0

