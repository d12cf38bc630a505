"""Benchmark the paged kernels on a CUDA GPU against copy bandwidth, SDPA and the previous kernel.

Llama-3-8B layer shapes (32 query / 8 KV heads, head size 128, bf16, block size 16) with
randomly permuted block tables: uniform and ragged decode batches, fp8 caches, short extends,
mixed batches in one launch, prefill, cache operations. Times are medians of
`triton.testing.do_bench` (L2 flushed before every run). Effective bandwidth = K and V bytes
read once / time. `--ab` times the previous decode kernel (kernels/decode_v1.py) and the
current one alternately, `--sweep` adds tile / split-rule variants. Every figure goes to
`--out` as JSON; summary tables print last (benchmarks/kernel_tables.py).

    PYTHONPATH=. python3 benchmarks/bench_kernels.py --out /tmp/bench.json [--ab] [--sweep]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fp8_swap
import fp8_vt
import kernel_ab
import kernel_sweeps
import kernel_tables
from kernel_ab import alternate, errors, ragged_lens, wrapper_only_us

from kernels.decode_config import choose_num_splits
from kernels.decode_v1 import paged_decode_attention_v1
from kernels.layer_timing import AttentionTimer, LayerShape, graph_us, host_us, median_us

SHAPE = LayerShape()
UNIFORM = [(1, 4096), (8, 4096), (32, 4096), (64, 4096), (128, 2048), (256, 1024),
           (16, 16384), (64, 16384)]
ISSUE_VLLM_US = [157, 169, 240, 292, 295, 300, 445, 1115]
RAGGED = [(64, 16, 8192), (256, 16, 2048), (16, 1000, 32768), (128, 100, 4000)]
ISSUE_RAGGED = [(367, 462), (309, 353), (378, 559), (340, 381)]  # (pagedsim, vLLM) us
NUM_BLOCKS = (1 << 20) // 16 + 64  # 1 Mi tokens: 4 GiB of bf16 K+V


def copy_bandwidth() -> dict:
    src = torch.randn(2 * 1024**3 // 2, device="cuda").view(torch.bfloat16)
    dst = torch.empty_like(src)
    us = median_us(lambda: dst.copy_(src))
    return {"bytes": 2 * src.numel() * 2, "us": us, "tbps": 2 * src.numel() * 2 / us / 1e6}


def sdpa_decode(t: AttentionTimer, lens: list[int]):
    """SDPA over a contiguous copy of a uniform batch's K/V, and its output."""
    b, ctx = len(lens), lens[0]
    tab = t.tables(lens).long()
    kc = t.k[tab].reshape(b, ctx, SHAPE.num_kv_heads, -1).transpose(1, 2).contiguous()
    vc = t.v[tab].reshape(b, ctx, SHAPE.num_kv_heads, -1).transpose(1, 2).contiguous()
    q4 = t.queries(b)[:, :, None, :]
    call = lambda: F.scaled_dot_product_attention(q4, kc, vc, enable_gqa=True)
    return median_us(call)


def bench_decode(t: AttentionTimer, ab: bool) -> list[dict]:
    rows = []
    for (batch, ctx), vllm in zip(UNIFORM, ISSUE_VLLM_US):
        lens = [ctx] * batch
        new = t.decode_call(lens)
        row = {"batch": batch, "ctx": ctx, "issue_vllm_us": vllm, "graph_us": graph_us(new),
               "host_us": host_us(new), "py_us": wrapper_only_us(new),
               "sdpa_us": sdpa_decode(t, lens), "err64": decode_error(t, lens[:4]),
               "splits": choose_num_splits(batch, SHAPE.num_kv_heads, ctx, 64, 132)}
        fns = {"new": new}
        fns.update({k: t.decode_call(lens, config=c) for k, c in kernel_ab.BF16_VARIANTS.items()})
        if ab:
            fns["v1"] = t.decode_call(lens, fn=paged_decode_attention_v1)
        row.update({f"{k}_us": v for k, v in alternate(fns, 5 if ab else 1).items()})
        row["us"] = row["new_us"]
        row.update({f"{k}_tbps": t.kv_bytes(lens) / row[f"{k}_us"] / 1e6 for k in fns})
        row["tbps"] = t.kv_bytes(lens) / row["us"] / 1e6
        if batch == 1:  # the small-batch target is under CUDA graphs
            row.update({f"{k}_graph_us": graph_us(fn) for k, fn in fns.items() if k != "new"})
        rows.append(row)
        print(f"decode {batch}x{ctx}: {row}", flush=True)
    return rows


def bench_ragged(t: AttentionTimer, ab: bool) -> list[dict]:
    """Ragged batches: the shipped split rule, kernel_ab.RAGGED_VARIANTS and (`ab`) v1."""
    rows = []
    for (n, lo, hi), (issue, vllm) in zip(RAGGED, ISSUE_RAGGED):
        lens = ragged_lens(n, lo, hi)
        fns = {"new": t.decode_call(lens)}
        fns.update({k: t.decode_call(lens, config=c) for k, c in kernel_ab.RAGGED_VARIANTS.items()})
        if ab:
            fns["v1"] = t.decode_call(lens, fn=paged_decode_attention_v1)
        row = {"batch": f"{n} x U[{lo}, {hi}]", "issue_us": issue, "issue_vllm_us": vllm,
               "graph_us": graph_us(fns["new"])}
        row.update({f"{k}_us": v for k, v in alternate(fns, 5 if ab else 1).items()})
        row.update({f"{k}_tbps": t.kv_bytes(lens) / row[f"{k}_us"] / 1e6 for k in fns})
        row["tbps"] = row["new_tbps"]
        rows.append(row)
        print(f"ragged {row}", flush=True)
    return rows


def decode_error(t: AttentionTimer, lens: list[int]) -> float:
    """max error per (sequence, head) against float64 over the dequantised cache."""
    return errors(t, lens, {"default": None})["default"]


def bench_fp8(t16: AttentionTimer, t8: AttentionTimer) -> list[dict]:
    """fp8 against bf16 (defaults), alternated, where kernel_ab.fp8_ab does not look."""
    rows = []
    for name, lens, rounds in (("1 x 4096", [4096], 5),
                               ("64 x U[16, 8192]", ragged_lens(64, 16, 8192), 3)):
        times = alternate({"bf16": t16.decode_call(lens), "fp8": t8.decode_call(lens)}, rounds)
        rows.append({"batch": name, **{f"{k}_us": v for k, v in times.items()},
                     "speedup": times["bf16"] / times["fp8"]})
        print(f"fp8 {rows[-1]}", flush=True)
    return rows


EXTENDS = [(1, 16, 16384), (16, 16, 16384), (3, 10, 384)]  # (sequences, new, cached)


def bench_extend(t: AttentionTimer) -> list[dict]:
    """Short extends against a decode reading the same KV: eager (alternated) and graph
    times, the eager host time per call and the wrapper's own Python (launch a no-op)."""
    rows = []
    for num_seqs, n, cached in EXTENDS:
        new, prefix = [n] * num_seqs, [cached] * num_seqs
        ext, dec = t.extend_call(new, prefix), t.decode_call([cached + n] * num_seqs)
        times = alternate({"extend": ext, "decode": dec}, 5)
        graphs = {"extend_graph_us": graph_us(ext), "decode_graph_us": graph_us(dec)}
        host = {"extend_host_us": host_us(ext), "decode_host_us": host_us(dec),
                "extend_py_us": wrapper_only_us(ext), "decode_py_us": wrapper_only_us(dec)}
        rows.append({"seqs": num_seqs, "new": n, "prefix": cached,
                     **{f"{k}_us": v for k, v in times.items()}, **graphs, **host,
                     "ratio": times["extend"] / times["decode"],
                     "graph_ratio": graphs["extend_graph_us"] / graphs["decode_graph_us"],
                     "host_ratio": host["extend_host_us"] / host["decode_host_us"]})
        print(f"extend {rows[-1]}", flush=True)
    return rows


def bench_mixed(t: AttentionTimer) -> list[dict]:
    rows = []
    for dec, new, prefix in kernel_ab.MIXED_CASES:
        one = t.mixed_call(dec, new, prefix)
        d, p = t.decode_call(dec), t.extend_call(new, prefix)
        times = alternate({"mixed": one, "decode": d, "prefill": p,
                           "two_calls": lambda d=d, p=p: (d(), p())}, 3)
        rows.append({"decodes": f"{len(dec)} x {dec[0]}", "chunks": list(zip(new, prefix)),
                     **{f"{k}_us": v for k, v in times.items()},
                     "ratio": times["mixed"] / times["two_calls"]})
        print(f"mixed {rows[-1]}", flush=True)
    return rows


def bench_prefill(t: AttentionTimer) -> dict:
    new, prefix = [2048] * 8, [2048] * 8
    call = t.extend_call(new, prefix)
    res = {"us": median_us(call), **kernel_sweeps.sdpa_prefill(t, new, prefix)}
    res["ratio_vs_sdpa"] = res["us"] / res["sdpa_us"]
    res["tflops"] = 4 * SHAPE.head_size * SHAPE.num_q_heads * 8 * sum(
        2048 + i + 1 for i in range(2048)) / res["us"] / 1e6
    print(f"prefill {res}", flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench_kernels.json", help="JSON file for all figures")
    ap.add_argument("--ab", action="store_true", help="time the previous decode kernel too")
    ap.add_argument("--sweep", default="", help="comma-separated sweeps: "
                    + ",".join(kernel_sweeps.SWEEPS))
    ap.add_argument("--only", default="", help="comma-separated sections to run (default all)")
    ap.add_argument("--dry", default="", metavar="I/N", help="compile only: call each timed "
                    "function once, worker I of N (run N of them in parallel before timing)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_kernels: needs a CUDA device", file=sys.stderr)
        return 2
    r = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
         "triton": triton.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    t16 = AttentionTimer(SHAPE, NUM_BLOCKS)
    t8 = AttentionTimer(SHAPE, NUM_BLOCKS, "fp8", seed=1)
    # the same fp8 values in both V layouts: the layout A/B, and the experiments, whose kernels
    # read token-major V (a copy only where the default layout is not the one needed)
    t8tm = t8 if t8.v_layout == "token_major" else t8.relaid("token_major")
    transposed = lambda: t8 if t8.v_layout == "transposed" else t8.relaid("transposed")
    sections = {
        "copy": copy_bandwidth, "decode": lambda: bench_decode(t16, args.ab),
        "ragged": lambda: bench_ragged(t16, args.ab), "fp8": lambda: bench_fp8(t16, t8),
        "extend": lambda: bench_extend(t16), "mixed": lambda: bench_mixed(t16),
        "prefill": lambda: bench_prefill(t16), "fp8_ab": lambda: kernel_ab.fp8_ab(t16, t8),
        "extend_ab": lambda: kernel_ab.extend_ab(t16), "mixed_ab": lambda: kernel_ab.mixed_ab(t16),
        "host": lambda: kernel_ab.host(t16, t8),
        "layout_ab": lambda: kernel_ab.layout_ab(t16, t8tm),
        "fp8_layout": lambda: kernel_ab.fp8_layout_ab(t16, transposed(), t8tm),
        "fp8_swap": lambda: kernel_ab.experiment_ab("fp8_swap", fp8_swap.SHAPES, t16, t8tm,
                                                    fp8_swap.calls()),
        "fp8_vt": lambda: kernel_ab.experiment_ab("fp8_vt", fp8_vt.SHAPES, t16, t8tm,
                                                  fp8_vt.calls(t8tm)),
        "sdpa": lambda: {f"{b}x{c}_us": sdpa_decode(t16, [c] * b) for b, c in ((64, 4096),
                                                                            (16, 16384))},
        "cache_ops": lambda: kernel_sweeps.cache_ops(SHAPE),
    }
    only = [s for s in args.only.split(",") if s] or list(sections)
    if args.dry:
        return dry_run(args.dry, sections, only, [s for s in args.sweep.split(",") if s], t16, t8)
    for name in only:
        t0 = time.time()
        try:
            r[name] = sections[name]()
        except Exception as exc:  # noqa: BLE001 - one broken section must not lose the rest
            r[name] = {"error": repr(exc)[:2000]}
            print(f"[{name} FAILED: {exc!r}]"[:3000], flush=True)
        print(f"[{name} done in {time.time() - t0:.0f} s]", flush=True)
    for name in [s for s in args.sweep.split(",") if s]:
        t0 = time.time()
        r[f"sweep_{name}"] = kernel_sweeps.run_sweep(name, t16, t8)
        print(f"[sweep {name} done in {time.time() - t0:.0f} s]", flush=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(r, fh, indent=1, default=str)
    os.replace(tmp, args.out)
    kernel_tables.print_tables(r)
    return 0


def dry_run(spec: str, sections: dict, only: list[str], sweeps: list[str], t16: AttentionTimer,
            t8: AttentionTimer) -> int:
    """--dry I/N: run the sections with every timer replaced by kernel_ab.Dry (compiles this
    worker's share of the kernels into Triton's cache); nothing is written."""
    index, workers = (int(x) for x in spec.split("/"))
    dry = kernel_ab.Dry(index, workers)
    for mod in (sys.modules[__name__], kernel_ab, kernel_sweeps):
        for name in ("median_us", "graph_us", "host_us", "wrapper_only_us"):
            if hasattr(mod, name):
                setattr(mod, name, dry)
    for name in ("decode_error", "sdpa_decode", "copy_bandwidth"):
        setattr(sys.modules[__name__], name, lambda *a, **k: float("nan"))
    kernel_ab.errors = lambda t, lens, configs: {k: float("nan") for k in configs}
    kernel_sweeps.sdpa_prefill = lambda *a, **k: {"sdpa_us": float("nan")}
    for name in only:
        if name not in ("copy", "sdpa", "cache_ops"):
            sections[name]()
    for name in sweeps:
        kernel_sweeps.run_sweep(name, t16, t8)
    print(f"[dry {spec}: {len(dry.seen)} functions, {time.time() - dry.t0:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
