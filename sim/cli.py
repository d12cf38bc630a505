"""Command line of ``simulate.py``: parse options into a frozen configuration, run, report.

Flow (Vidur-style thin driver): parse -> resolve model, GPU, KV capacity, step-time model and
trace -> print the resolved configuration -> simulate every allocator -> write the result
files atomically -> print a comparison table. Invalid options or unreadable inputs print one
line on stderr and exit with status 2; a broken invariant exits with status 1 after the
results are written.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

DEFAULT_ALLOCATORS = "paged,paged-nocache,max,pow2,oracle,ft"


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _nonneg_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser() -> Parser:
    """Every option of simulate.py, with its default in --help."""
    p = Parser(prog="simulate.py", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
               description="Replay a request trace through a SimPy model of an LLM server once "
                           "per KV-cache allocator and compare them.")
    p.add_argument("trace", nargs="?", default=None,
                   help="trace file (Azure, BurstGPT, Mooncake, token-id JSONL, ...); "
                        "omitted: the built-in default workload")
    p.add_argument("--format", default=None, help="trace format (default: detected)")
    p.add_argument("--allocators", default=DEFAULT_ALLOCATORS,
                   help="comma-separated: paged, paged-nocache, max, pow2, oracle, ft, "
                        "or module:Class")
    p.add_argument("--placement", choices=("buddy", "first-fit"), default="buddy",
                   help="placement of contiguous regions")
    g = p.add_argument_group("model and GPU")
    g.add_argument("--model", default="llama-2-7b", help="model preset or HF config.json path")
    g.add_argument("--kv-cache-dtype", default="auto", help="auto, fp16, bf16 or fp8")
    g.add_argument("--gpu", default="a100-80gb", help="GPU preset, or 'custom'")
    g.add_argument("--gpu-mem-gib", type=float, default=None, help="override GPU memory")
    g.add_argument("--gpu-hbm-gbps", type=float, default=None, help="override HBM GB/s")
    g.add_argument("--gpu-tflops", type=float, default=None, help="override dense TFLOP/s")
    g.add_argument("--gpu-pcie-gbps", type=float, default=None, help="override PCIe GB/s")
    g.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel degree")
    g.add_argument("--step-model", default="roofline",
                   help="roofline[:k=v,...], poly:FILE or table:FILE")
    c = p.add_argument_group("KV cache and scheduler")
    c.add_argument("--block-size", type=_positive_int, default=16, help="tokens per block")
    c.add_argument("--num-gpu-blocks", type=_positive_int, default=None,
                   help="override the computed pool size (as printed by vLLM)")
    c.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="fraction of GPU memory vLLM may use")
    c.add_argument("--max-num-seqs", type=_positive_int, default=256,
                   help="most sequences running at once")
    c.add_argument("--max-num-batched-tokens", type=_positive_int, default=8192,
                   help="token budget of one step")
    c.add_argument("--max-model-len", type=_positive_int, default=None,
                   help="longest sequence (default 4096, capped at the model's context)")
    c.add_argument("--chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                   help="split long prefills over steps")
    c.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="prefix caching for the paged allocator")
    c.add_argument("--preemption", choices=("recompute", "swap"), default="recompute",
                   help="how a preempted request gives back its blocks")
    c.add_argument("--swap-space", type=_nonneg_float, default=4.0,
                   help="CPU swap space per GPU, GiB")
    c.add_argument("--n", type=_positive_int, default=None,
                   help="parallel samples per request (default: the trace's, else 1)")
    c.add_argument("--beam-width", type=_positive_int, default=None,
                   help="beam width (default: the trace's, else 1)")
    c.add_argument("--sampling-mode", choices=("cow", "fanout"), default="cow",
                   help="n > 1: one prefill then fork (cow) or n independent requests")
    c.add_argument("--beam-keep-prob", type=float, default=0.75,
                   help="beam model: chance a new beam keeps its own parent")
    c.add_argument("--block-hash", default="fast",
                   help="prefix-cache block hash: fast (hits identical to sha256) or a vLLM "
                        "hash name (sha256, sha256_cbor, xxhash, blake2b)")
    w = p.add_argument_group("workload and run")
    w.add_argument("--rate-scale", type=float, default=1.0, help="replay at X times the rate")
    w.add_argument("--limit", type=_positive_int, default=None, help="first N requests only")
    w.add_argument("--seed", type=int, default=0, help="seed for token ids and the beam model")
    w.add_argument("--out", default=None, help="output directory (default results/<trace>)")
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
    w.add_argument("--sweep", metavar="SPEC", default=None,
                   help="run the sweep SPEC.toml instead (same as python -m sim.sweep SPEC)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run simulate.py with ``argv``; returns the exit status."""
    from sim.simulation import InputError, run_from_args

    argv = sys.argv[1:] if argv is None else list(argv)
    if any(arg == "--sweep" or arg.startswith("--sweep=") for arg in argv):
        from sim.sweep.run import main_from_simulate

        return main_from_simulate(argv)
    args = build_parser().parse_args(argv)
    try:
        return run_from_args(args)
    except InputError as exc:
        print(f"simulate.py: error: {exc}", file=sys.stderr)
        return 2
