"""Replay a sample of an allocation log's steps through the whole decoder forward and time them.

`python -m kernels.execute LOG [--device cuda|cpu] [--out FILE] [--per-class K] [--max-steps N]
[--seed S] [--all-steps]` reads the log `simulate.py --record-allocation-log` writes (its header
must carry the whole architecture, kernels/execute/arch.py), samples each paged section's steps
(kernels/execute/sample.py), and executes each chosen step on the logged block tables and slots
(kernels/execute/step.py). Output: one JSON-lines file (kernels/execute/output.py, default
`executed_steps.jsonl` beside the log) and a printed summary. Exit 0: done; 2: bad input.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernels.execute.arch import Architecture, kv_cache_dtype
from kernels.execute.model import Engine, GiB
from kernels.execute.output import (
    FORMAT,
    FORMAT_VERSION,
    METHOD,
    STEP_FIELDS,
    AtomicWriter,
    environment,
    logged_vs_measured,
    summary_table,
)
from kernels.execute.sample import Sampler, SampleRule, shape_key
from kernels.execute.step import ExecOptions, execute_record
from kernels.execute.timing import TimingOptions
from kernels.validate.log import LogError, LogHeader, iter_objects, parse_header, parse_step


@dataclass(slots=True)
class RunOptions:
    """The CLI's choices; tests set fields directly."""

    device: str = "cpu"
    allocator: str | None = None
    rule: SampleRule = field(default_factory=SampleRule)
    all_steps: bool = False
    execution: ExecOptions = field(default_factory=ExecOptions)
    kv_layers: int | None = None
    reserve_gib: float = 6.0
    verbose: bool = False
    traces: dict[int, list[dict[str, Any]]] | None = None  # step -> launches (tests)


@dataclass(slots=True)
class Section:
    """One allocator section being scanned: header, architecture, sampler, kept lines."""

    header: LogHeader
    arch: Architecture
    sampler: Sampler
    kept: list[tuple[str, tuple[int, dict[str, Any]]]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)


def step_key(obj: dict[str, Any], where: str) -> str | None:
    """The shape class of a raw step line (None: no sequence computes a token)."""
    seqs = obj.get("seqs")
    if not isinstance(seqs, list):
        raise LogError(f"{where}: missing field 'seqs'")
    spans = []
    for i, seq in enumerate(seqs):
        pos = seq.get("positions") if isinstance(seq, dict) else None
        if not (isinstance(pos, list) and len(pos) == 2 and all(type(p) is int for p in pos)):
            raise LogError(f"{where}: field 'seqs[{i}].positions' must be [first, last + 1]")
        spans.append((pos[0], pos[1]))
    if not any(e > s for s, e in spans):
        return None
    return shape_key(spans, bool(obj.get("copies")),
                     bool(obj.get("swap_out") or obj.get("swap_in")))


def _open_section(obj: dict[str, Any], path: Path, line: int, opts: RunOptions
                  ) -> Section | None:
    model = obj.get("model")
    if isinstance(model, dict):  # the executor's word on the cache dtype (e5m2), not the reader's
        kv_cache_dtype(model.get("kv_cache_dtype"), "auto", f"{path}:{line}")
    hdr = parse_header(obj, path, line)
    if opts.allocator is not None and hdr.allocator != opts.allocator:
        return None
    if not hdr.paged:
        if opts.allocator is None:
            return None
        raise LogError(f"{path}:{line}: allocator {hdr.allocator!r} is contiguous; only paged "
                       "allocators are executed")
    arch = Architecture.from_header(obj.get("model"), f"{path}:{line}")
    return Section(hdr, arch, Sampler(opts.rule))


def _offer(sec: Section, obj: dict[str, Any], path: Path, line: int, opts: RunOptions) -> None:
    key = step_key(obj, f"{path}:{line}")
    if opts.all_steps:
        sec.sampler.num_steps += 1
        if key is None:
            sec.sampler.num_empty += 1
        else:
            sec.sampler.counts[key] = sec.sampler.counts.get(key, 0) + 1
            sec.kept.append((key, (line, obj)))
    else:
        sec.sampler.offer(key, (line, obj))


def _execute(sec: Section, path: Path, opts: RunOptions, out: AtomicWriter) -> None:
    chosen = sec.kept if opts.all_steps else sec.sampler.chosen()
    records = [(key, parse_step(obj, path, line)) for key, (line, obj) in chosen]
    hdr = sec.header
    engine = Engine(sec.arch, hdr.block_size, hdr.num_gpu_blocks, hdr.num_cpu_blocks,
                    torch.device(opts.device), seed=hdr.seed, kv_layers=opts.kv_layers,
                    reserve_bytes=int(opts.reserve_gib * GiB), k_scale=hdr.k_scale,
                    v_scale=hdr.v_scale)
    sampling = {**asdict(opts.rule), "all_steps": opts.all_steps, **sec.sampler.summary()}
    out.line({"kind": "header", "format": FORMAT, "format_version": FORMAT_VERSION,
              "log": str(path), "section": hdr.allocator, "block_size": hdr.block_size,
              "num_gpu_blocks": hdr.num_gpu_blocks, "num_cpu_blocks": hdr.num_cpu_blocks,
              "model": sec.arch.to_json(), **environment(engine.device), "sampling": sampling,
              "memory": engine.memory(), "options": opts.execution.to_json(),
              "method": METHOD, "fields": STEP_FIELDS})
    for key, rec in records:
        trace = None if opts.traces is None else opts.traces.setdefault(rec.step, [])
        row = {"kind": "step", "section": hdr.allocator, "line": rec.line, "class": key,
               **execute_record(engine, rec, opts.execution, trace),
               "logged_attention_s": rec.attention_s}
        out.line(row)
        sec.rows.append(row)
        if opts.verbose:
            print(f"  step {rec.step} {key}: graph {row['graph_s']} eager {row['eager_s']:.4g}",
                  file=sys.stderr)
    del engine
    if opts.device == "cuda":
        torch.cuda.empty_cache()


def execute_log(path: str | Path, out_path: str | Path, opts: RunOptions) -> list[Section]:
    """Execute every chosen section of the log at `path`; write `out_path`.

    Raises:
        LogError: unreadable log, bad field, or no section to execute.
    """
    path = Path(path)
    sections: list[Section] = []
    current: Section | None = None
    seen_header = False
    with AtomicWriter(out_path) as out:
        for line, obj in iter_objects(path):
            if obj["kind"] == "header":
                if current is not None:
                    _execute(current, path, opts, out)
                current = _open_section(obj, path, line, opts)
                seen_header = True
                sections += [current] if current is not None else []
            elif not seen_header:
                raise LogError(f"{path}:{line}: step line before any header")
            elif current is not None:
                _offer(current, obj, path, line, opts)
        if current is not None:
            _execute(current, path, opts, out)
        if not sections:
            raise LogError(f"{path}: no paged allocator section"
                           + (f" named {opts.allocator!r}" if opts.allocator else ""))
    return sections


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kernels.execute",
                                description=(__doc__ or "").split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("log", help="allocation_log.jsonl.gz written by simulate.py")
    p.add_argument("--device", choices=("cuda", "cpu"),
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", help="output JSON lines (default: executed_steps.jsonl beside LOG)")
    p.add_argument("--allocator", help="execute only this allocator's section")
    p.add_argument("--per-class", type=int, default=4, help="steps per shape class at most")
    p.add_argument("--max-steps", type=int, default=256, help="steps per section at most "
                   "(never fewer than one per class)")
    p.add_argument("--seed", type=int, default=0, help="sampling and routing seed")
    p.add_argument("--all-steps", action="store_true", help="execute every step (small logs)")
    p.add_argument("--max-capture-size", type=int, default=512, help="largest CUDA-graph size")
    p.add_argument("--no-graphs", action="store_true", help="eager times only")
    p.add_argument("--no-parts", action="store_true", help="skip the per-part graphs")
    p.add_argument("--kv-layers", type=int, help="allocate this many layers' KV caches "
                   "(default: all that fit)")
    p.add_argument("--reserve-gib", type=float, default=6.0,
                   help="GPU memory kept free for activations and graphs")
    p.add_argument("-v", "--verbose", action="store_true", help="print every executed step")
    return p.parse_args(argv)


def _options(args: argparse.Namespace) -> RunOptions:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise LogError("--device cuda: no CUDA device is available (use --device cpu)")
    if args.kv_layers is not None and args.kv_layers < 1:
        raise LogError("--kv-layers must be >= 1")
    try:
        rule = SampleRule(args.per_class, args.max_steps, args.seed)
    except ValueError as exc:
        raise LogError(f"{exc} (--per-class, --max-steps)") from None
    timing = TimingOptions(graphs=not args.no_graphs, parts=not args.no_parts)
    return RunOptions(device=args.device, allocator=args.allocator, rule=rule,
                      all_steps=args.all_steps, kv_layers=args.kv_layers,
                      reserve_gib=args.reserve_gib, verbose=args.verbose,
                      execution=ExecOptions(args.max_capture_size, args.seed, timing))


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 done, 2 bad input)."""
    args = _parse_args(argv)
    out = args.out or str(Path(args.log).parent / "executed_steps.jsonl")
    try:
        sections = execute_log(args.log, out, _options(args))
    except (LogError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for sec in sections:
        s = sec.sampler
        print(f"section {sec.header.allocator} ({sec.arch.name}, kv "
              f"{sec.arch.kv_cache_dtype}): {len(sec.rows)} of "
              f"{s.num_steps} steps executed, {len(s.counts)} shape classes")
        print("\n".join(summary_table(sec.rows, "mode")))
        print(logged_vs_measured(sec.rows))
    print(f"wrote {out}")
    return 0
