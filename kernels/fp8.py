"""fp8 (e4m3) KV cache: per-tensor scales, quantised on write, dequantised on read.

As with vLLM's `--kv-cache-dtype fp8`, the cache holds `float8_e4m3fn` values of `x / scale`,
saturated to +-448 and rounded to nearest (ties to even); one float scale for K and one for V.
`reshape_and_cache` quantises (`to_e4m3`); the attention kernels widen the fp8 values to the
query dtype (exact: e4m3 is a subset of bf16 and fp16), fold K's scale into the softmax scale
and V's into the output. `quantize` / `dequantize` are the torch statement of the same rule,
for references and tests: both multiply by the fp32 reciprocal of the scale.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0


def is_fp8(dtype: torch.dtype) -> bool:
    """Whether `dtype` is the fp8 cache dtype the kernels support (e4m3, finite)."""
    return dtype == FP8_DTYPE


@functools.lru_cache(maxsize=256)
def inv_scale(scale: float) -> float:
    """The fp32 reciprocal of a scale, as the kernels receive it (one rounding to fp32)."""
    if not scale > 0 or scale == float("inf"):
        raise ValueError(f"kv scale {scale!r} must be a positive finite float")
    return float(torch.tensor(1.0 / scale, dtype=torch.float32))


def quantize(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """`x / scale` as e4m3: saturated to +-448, rounded to nearest even; NaN stays NaN."""
    inv = torch.tensor(inv_scale(scale), dtype=torch.float32, device=x.device)
    return (x.float() * inv).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def dequantize(x: torch.Tensor, scale: float = 1.0, dtype: torch.dtype = torch.float64
               ) -> torch.Tensor:
    """The values an fp8 cache stands for, `x * scale`, in `dtype` (float64: exact)."""
    return x.to(dtype) * scale


@triton.jit
def round_to_e4m3(x):
    """fp32 `x` (|x| <= 448) rounded to the nearest e4m3 value, ties to even, still in fp32.

    For the interpreter, whose fp32 -> fp8 cast does not round to nearest (the GPU's does):
    rounding first makes the cast exact. Normal values keep 3 of fp32's 23 mantissa bits;
    below 2^-6, adding 2^14 (whose fp32 ulp is e4m3's subnormal step 2^-9) rounds the value.
    """
    bits = x.to(tl.uint32, bitcast=True)
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
    ax = tl.abs(x)
    sub = (ax + 16384.0) - 16384.0
    sub = tl.where(x < 0, -sub, sub)
    return tl.where(ax < 0.015625, sub, normal)


@triton.jit
def to_e4m3(x, inv, ROUND: tl.constexpr):
    """`x * inv` saturated to +-448 (NaN kept) and cast to e4m3; ROUND under the interpreter."""
    y = x.to(tl.float32) * inv
    y = tl.where(y != y, y, tl.minimum(tl.maximum(y, -448.0), 448.0))  # noqa: PLR0124 (NaN)
    if ROUND:  # the interpreter's cast also turns NaN into 0: give NaN its bits, 0x7f
        nan = tl.full(y.shape, 0x7F, tl.uint8).to(tl.float8e4nv, bitcast=True)
        return tl.where(y != y, nan, round_to_e4m3(y).to(tl.float8e4nv))  # noqa: PLR0124
    return y.to(tl.float8e4nv)


# Four e4m3 bytes in one register -> four fp16 values in two, by two packed conversions.
_E4M3X4_TO_F16 = tl.constexpr("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; "
                              "cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }")


@triton.jit
def widen_e4m3(x, ASM: tl.constexpr):
    """e4m3 values as fp16 (exact). ASM (compiled kernels only): the packed PTX conversion,
    applied in the layout the values were loaded in, 16 bytes per thread, before any layout
    change; the plain cast lets Triton convert after moving the bytes into the dot's operand
    layout, which for V (keys along the contraction) reads shared memory one byte at a time."""
    if ASM:
        return tl.inline_asm_elementwise(_E4M3X4_TO_F16, "=r,=r,r",
                                         [x.to(tl.uint8, bitcast=True)], dtype=tl.float16,
                                         is_pure=False, pack=4)
    return x.to(tl.float16)
