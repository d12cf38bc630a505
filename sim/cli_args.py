"""``simulate.py``'s argument parser: every option, its group, default and help text.

``build_parser`` builds the parser (vllm bench serve's spellings from ``sim/conventions.py``,
the release options from ``sim/release.py``); ``parse_options`` turns a command line into
checked ``Options`` (a bad value: one line naming the option, exit status 2). ``sim/cli.py``
resolves and runs them.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import fields
from typing import NoReturn

from sim.config import PLACEMENTS, PREEMPTION_MODES, SAMPLING_MODES, InputError, Options
from sim.conventions import HelpFormatter, add_convention_options
from sim.cost.api_path import (
    DEFAULT_API_OUTPUT_MS,
    DEFAULT_API_OVERHEAD_MS,
    DEFAULT_TOKENIZE_US_PER_TOKEN,
)
from sim.listing import print_list
from sim.release import add_release_options

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
