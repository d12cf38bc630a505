"""Measure per-layer attention and linear-layer times for the simulator's table step-time model.

Writes sim/calibration/h200_llama3_8b.csv (format in sim/calibration/README.md): paged decode
attention over a batch x context grid, paged prefill/extend attention over a new-tokens x
context grid, and the four bf16 linear layers of one Llama-3-8B layer over a token grid. Times
are medians of `triton.testing.do_bench` (L2 flushed before each run), in microseconds.

    PYTHONPATH=. python3 benchmarks/calibrate.py --out sim/calibration/h200_llama3_8b.csv
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import triton
from triton.testing import do_bench

from kernels.decode_attention import paged_decode_attention
from kernels.prefill_attention import paged_prefill_attention

HQ, HKV, D, BS, DT = 32, 8, 128, 16, torch.bfloat16
DEVICE = "cuda"
HIDDEN, INTERMEDIATE = 4096, 14336
MAX_TOKENS = 1 << 21  # 2 Mi cached tokens: 8 GiB of K+V, the cache every grid point draws from
DECODE_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
DECODE_CONTEXTS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
PREFILL_NEW = [16, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
PREFILL_PREFIX = [0, 512, 2048, 8192, 16384]
GEMM_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def time_call(fn, *args, **kwargs) -> float:
    """Median microseconds of `fn(*args, **kwargs)` after one untimed call (compilation)."""
    fn(*args, **kwargs)
    return (
        float(do_bench(lambda: fn(*args, **kwargs), warmup=25, rep=100, return_mode="median")) * 1e3
    )


def tables_for(batch: int, ctx: int, num_blocks: int, gen: torch.Generator) -> torch.Tensor:
    """`batch` block tables of `ctx` tokens each, over randomly permuted distinct blocks."""
    per_seq = triton.cdiv(ctx, BS)
    ids = torch.randperm(num_blocks - 1, device=DEVICE, generator=gen)[: batch * per_seq] + 1
    return ids.view(batch, per_seq).to(torch.int32)


def decode_rows(k: torch.Tensor, v: torch.Tensor, gen: torch.Generator) -> list[tuple]:
    rows = []
    for batch in DECODE_BATCHES:
        for ctx in DECODE_CONTEXTS:
            if batch * ctx > MAX_TOKENS:
                continue
            tables = tables_for(batch, ctx, k.shape[0], gen)
            lens = torch.full((batch,), ctx, dtype=torch.int32, device=DEVICE)
            q = torch.randn((batch, HQ, D), device=DEVICE, generator=gen).to(DT)
            out = torch.empty_like(q)
            us = time_call(
                paged_decode_attention, q, k, v, tables, lens, max_context_len=ctx, out=out
            )
            # Table convention: context = tokens cached before the step (the new one excluded).
            rows.append(("decode_attn", batch, ctx - 1, 1, us))
    return rows


def prefill_rows(k: torch.Tensor, v: torch.Tensor, gen: torch.Generator) -> list[tuple]:
    rows = []
    for new in PREFILL_NEW:
        for prefix in PREFILL_PREFIX:
            ctx = prefix + new
            tables = tables_for(1, ctx, k.shape[0], gen)
            lens = torch.tensor([ctx], dtype=torch.int32, device=DEVICE)
            starts = torch.tensor([0, new], dtype=torch.int32, device=DEVICE)
            q = torch.randn((new, HQ, D), device=DEVICE, generator=gen).to(DT)
            out = torch.empty_like(q)
            us = time_call(
                paged_prefill_attention, q, k, v, tables, starts, lens, max_new_tokens=new, out=out
            )
            rows.append(("prefill_attn", 1, prefix, new, us))
    return rows


def gemm_rows(gen: torch.Generator) -> list[tuple]:
    """One layer's linear layers: fused QKV, attention out, fused gate/up, down (bf16, cuBLAS)."""

    def weight(n_in: int, n_out: int) -> torch.Tensor:
        return (torch.randn((n_in, n_out), device=DEVICE, generator=gen) * n_in**-0.5).to(DT)

    w_qkv, w_o = weight(HIDDEN, (HQ + 2 * HKV) * D), weight(HQ * D, HIDDEN)
    w_gate_up, w_down = weight(HIDDEN, 2 * INTERMEDIATE), weight(INTERMEDIATE, HIDDEN)
    rows = []
    for tokens in GEMM_TOKENS:
        x = torch.randn((tokens, HIDDEN), device=DEVICE, generator=gen).to(DT)
        attn = torch.randn((tokens, HQ * D), device=DEVICE, generator=gen).to(DT)
        act = torch.randn((tokens, INTERMEDIATE), device=DEVICE, generator=gen).to(DT)

        rows.append(
            (
                "gemm",
                1,
                0,
                tokens,
                time_call(_linear_layers, x, attn, act, w_qkv, w_o, w_gate_up, w_down),
            )
        )
    return rows


def _linear_layers(x, attn, act, w_qkv, w_o, w_gate_up, w_down) -> None:
    torch.matmul(x, w_qkv)
    torch.matmul(attn, w_o)
    torch.matmul(x, w_gate_up)
    torch.matmul(act, w_down)


def write_csv(path: str, rows: list[tuple]) -> None:
    props = torch.cuda.get_device_properties(0)
    sms, gib = props.multi_processor_count, props.total_memory / 2**30
    header = [
        f"# machine: {torch.cuda.get_device_name()} ({sms} SMs, {gib:.0f} GiB)",
        f"# date: {time.strftime('%Y-%m-%d', time.gmtime())}",
        f"# torch: {torch.__version__}; triton: {triton.__version__}",
        "# model: Llama-3-8B",
        f"# gpu: {torch.cuda.get_device_name()}",
        "# tp: 1",
        "# kv_cache_dtype: bf16",
        (
            "# shape: one Llama-3-8B layer (32 q / 8 kv heads, head 128, hidden 4096, "
            "intermediate 14336), bf16,"
            " block size 16; kernels: pagedsim kernels/ (default configs); gemm: torch matmul"
        ),
        (
            "# time_us: median of triton.testing.do_bench, L2 flushed; columns: see "
            "sim/calibration/README.md"
        ),
        "kind,batch,context,new_tokens,time_us",
    ]
    lines = header + [f"{kind},{b},{c},{n},{t:.2f}" for kind, b, c, n, t in rows]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out",
        default="sim/calibration/h200_llama3_8b.csv",
        help="CSV path (default: %(default)s)",
    )
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("calibrate: needs a CUDA device", file=sys.stderr)
        return 2
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    num_blocks = MAX_TOKENS // BS + 1
    k = torch.randn((num_blocks, BS, HKV, D), device=DEVICE, generator=gen).to(DT)
    v = torch.randn((num_blocks, BS, HKV, D), device=DEVICE, generator=gen).to(DT)
    rows = []
    for name, fn in (
        ("decode", lambda: decode_rows(k, v, gen)),
        ("prefill", lambda: prefill_rows(k, v, gen)),
        ("gemm", lambda: gemm_rows(gen)),
    ):
        t0 = time.time()
        rows += fn()
        print(f"[calibrate {name}: {time.time() - t0:.0f} s]", flush=True)
    write_csv(args.out, rows)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
