"""Compile the attention kernel for a GPU architecture without a GPU (Triton's NVIDIA backend
and the ptxas it bundles), for the launch plans of a set of shapes.

The interpreter runs the kernels' arithmetic on the CPU but checks nothing of what only the
compiler sees (layouts of reshaped tiles, inline PTX, shared-memory use); this does, up to a
cubin, so a kernel change can be checked before any GPU run:

    TRITON_INTERPRET=0 python -m kernels.compile_check [--capability 90] [--quick]

prints one line per shape (shared memory bytes, or the compiler's error) and exits 1 if any
shape fails. Run with TRITON_INTERPRET unset or 0 (interpreted jit helpers cannot compile).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels.attention_kernel import paged_attention_kernel
from kernels.attention_plan import Shape, make_plan
from kernels.decode_config import DecodeConfig
from kernels.fp8 import FP8_DTYPE
from kernels.launch import for_device

_FLOATS = ("scale_log2", "cap_in", "cap_out", "v_scale")
_TRITON_TYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
                 FP8_DTYPE: "fp8e4nv"}

# Llama-3-8B layer shapes: 64 decodes over 4 K tokens, and variations of one field each
BASE = Shape(64, 1, 0, 1, 4096, 32, 8, 128, 16, torch.bfloat16, FP8_DTYPE, None, None, None,
             False, 128**-0.5, 1.0, 1.0, 0, None, None, 132, False, False, True)
SHAPES = {
    "fp8 decode, V transposed": BASE,
    "fp8 decode, V token-major": replace(BASE, v_transposed=False),
    "fp8 decode, V transposed, window": replace(BASE, window=1000),
    "fp8 decode, V transposed, blocks of 64": replace(BASE, block_size=64),
    "fp8 decode, V transposed, blocks of 8, head 256": replace(BASE, block_size=8,
                                                               head_size=256),
    "fp8 decode, V transposed, hand pipeline asked": replace(
        BASE, decode_config=DecodeConfig(block_n=64, num_warps=4, num_stages=1,
                                         pipeline="prefetch")),
    "fp8 extends, V transposed": replace(BASE, num_small=16, small_len=16, q_starts=True),
    "fp8 prefill, V transposed": replace(BASE, num_small=0, num_large=8, large_len=2048,
                                         q_starts=True),
    "fp8 mixed, V transposed": replace(BASE, num_large=1, large_len=2048, q_starts=True),
    "bf16 decode": replace(BASE, kv_dtype=torch.bfloat16, v_transposed=False),
    "bf16 mixed": replace(BASE, kv_dtype=torch.bfloat16, v_transposed=False, num_large=1,
                          large_len=2048, q_starts=True),
}
QUICK = ("fp8 decode, V transposed", "fp8 decode, V transposed, window", "fp8 mixed, V transposed")


def compile_plan(sh: Shape, capability: int = 90) -> int:
    """Compile the kernel of `sh`'s plan for `capability` (sm_XX); its shared memory bytes."""
    plan = make_plan(sh)
    kernel = for_device(paged_attention_kernel, torch.device("cuda"))
    names = kernel.arg_names
    consts = {n: plan.constexprs[n] for n in names[names.index("NUM_KV_HEADS"):]}
    q, kv = _TRITON_TYPES[sh.dtype], _TRITON_TYPES[sh.kv_dtype]
    pointers = {"out_ptr": q, "q_ptr": q, "k_ptr": kv, "v_ptr": kv, "part_ptr": "fp32",
                "lse_ptr": "fp32", "sinks_ptr": "fp32", "counter_ptr": "i32",
                "tables_ptr": "i32", "lens_ptr": "i32", "starts_ptr": "i32"}
    sig = {n: "constexpr" if n in consts else f"*{pointers[n]}" if n in pointers
           else "fp32" if n in _FLOATS else "i32" for n in names}
    compiled = triton.compile(ASTSource(kernel, sig, consts),
                              target=GPUTarget("cuda", capability, 32), options=plan.launch)
    return int(compiled.metadata.shared)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capability", type=int, default=90, help="sm_XX (default 90: Hopper)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    args = ap.parse_args(argv)
    failed = 0
    for name, sh in SHAPES.items():
        if args.quick and name not in QUICK:
            continue
        try:
            print(f"{name}: ok, {compile_plan(sh, args.capability)} B shared", flush=True)
        except Exception as exc:  # noqa: BLE001 - report every shape, then fail
            failed += 1
            print(f"{name}: FAILED {exc!r}"[:2000], flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
