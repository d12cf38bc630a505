"""The small fused kernels of a decoder layer: add + RMSNorm, rotary embedding, SiLU-and-mul.

These are the element-wise steps vLLM runs as one kernel each (`fused_add_rms_norm`,
`rotary_embedding`, `silu_and_mul`); left to torch they would be several launches apiece and the
executed forward's "other" time would be inflated. Each program owns one row (a token, or one
head of a token); arithmetic is fp32, results are stored in the tensor's dtype.

    add + RMSNorm:  r <- x + r;  out = r / sqrt(mean(r^2) + eps) * w
    rotary (NeoX):  [x1, x2] -> [x1 cos - x2 sin, x2 cos + x1 sin], angles from the position
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.launch import for_device, next_power_of_2


@triton.jit
def _rms_norm_kernel(
    out_ptr,  # [rows * NUM_HEADS, n] contiguous
    x_ptr,  # [rows, NUM_HEADS, n]: token stride stride_xt, head stride stride_xh
    res_ptr,  # [rows, n] contiguous residual (HAS_RES)
    w_ptr,  # [n]
    stride_xt, stride_xh, n, eps,
    NUM_HEADS: tl.constexpr, HAS_RES: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    src = x_ptr + (row // NUM_HEADS) * stride_xt + (row % NUM_HEADS) * stride_xh
    x = tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        x += tl.load(res_ptr + row * n + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(res_ptr + row * n + offs, x.to(res_ptr.dtype.element_ty), mask=mask)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / n + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n + offs, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotate(base, cos, sin, NUM_HEADS: tl.constexpr, HALF: tl.constexpr,
            BLOCK_H: tl.constexpr):
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HALF)
    mask = (offs_h < NUM_HEADS)[:, None]
    first = base + offs_h[:, None] * (2 * HALF) + offs_d[None, :]  # [BLOCK_H, HALF]
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(first, (x1 * cos - x2 * sin).to(base.dtype.element_ty), mask=mask)
    tl.store(first + HALF, (x2 * cos + x1 * sin).to(base.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr,  # [num_tokens, heads, 2 * HALF], heads contiguous, token strides below
    pos_ptr,  # [num_tokens]
    cos_sin_ptr,  # [max_positions, 2 * HALF] fp32: cos in the first half, sin in the second
    stride_qt, stride_kt,
    NUM_Q_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HALF: tl.constexpr,
    BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    offs_d = tl.arange(0, HALF)
    cos = tl.load(cos_sin_ptr + pos * (2 * HALF) + offs_d)[None, :]
    sin = tl.load(cos_sin_ptr + pos * (2 * HALF) + HALF + offs_d)[None, :]
    _rotate(q_ptr + t * stride_qt, cos, sin, NUM_Q_HEADS, HALF, BLOCK_HQ)
    _rotate(k_ptr + t * stride_kt, cos, sin, NUM_KV_HEADS, HALF, BLOCK_HK)


@triton.jit
def _silu_and_mul_kernel(out_ptr, x_ptr, n, stride_x, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    g = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * stride_x + n + cols, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor,
             residual: torch.Tensor | None = None) -> None:
    """RMSNorm of the last dim of `x` (`[T, n]` or `[T, H, n]`) into contiguous `out`.

    With `residual` (`[T, n]`, contiguous), first `residual += x`, then normalise `residual`.
    """
    x3 = x.unsqueeze(1) if x.dim() == 2 else x
    n = x3.shape[-1]
    if x3.stride(-1) != 1 or not out.is_contiguous() or out.numel() != x3.numel():
        raise ValueError("rms_norm: x needs a contiguous last dim and out x's element count")
    if residual is not None and (x3.shape[1] != 1 or residual.shape != (x3.shape[0], n)):
        raise ValueError("rms_norm: a residual needs [T, n] rows")
    rows = x3.shape[0] * x3.shape[1]
    if rows == 0:
        return
    block = next_power_of_2(n)
    for_device(_rms_norm_kernel, x.device)[(rows,)](
        out, x3, out if residual is None else residual, weight, x3.stride(0), x3.stride(1), n,
        eps, NUM_HEADS=x3.shape[1], HAS_RES=residual is not None, BLOCK=block,
        num_warps=max(1, min(16, block // 512)),
    )


def rotary(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
           cos_sin: torch.Tensor) -> None:
    """NeoX rotary embedding in place on `q` `[T, Hq, D]` and `k` `[T, Hkv, D]` (heads
    contiguous, any token stride) at `positions` `[T]`, from `rope_cache`'s table."""
    num_tokens, num_q, dim = q.shape
    if k.shape[0] != num_tokens or k.shape[2] != dim or q.stride()[1:] != (dim, 1) \
            or k.stride()[1:] != (dim, 1) or cos_sin.shape[1] != dim:
        raise ValueError(f"rotary: q {tuple(q.shape)} / k {tuple(k.shape)} / table "
                         f"{tuple(cos_sin.shape)} do not match, or heads are not contiguous")
    if num_tokens == 0:
        return
    for_device(_rotary_kernel, q.device)[(num_tokens,)](
        q, k, positions, cos_sin, q.stride(0), k.stride(0), NUM_Q_HEADS=num_q,
        NUM_KV_HEADS=k.shape[1], HALF=dim // 2, BLOCK_HQ=next_power_of_2(num_q),
        BLOCK_HK=next_power_of_2(k.shape[1]), num_warps=4,
    )


def silu_and_mul(x: torch.Tensor, out: torch.Tensor) -> None:
    """`out = silu(x[:, :n]) * x[:, n:]` for `x` `[T, 2n]` and `out` `[T, n]`."""
    n = out.shape[1]
    if x.shape != (out.shape[0], 2 * n) or x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError(f"silu_and_mul: x {tuple(x.shape)} must be [T, 2 x {n}]")
    if out.shape[0] == 0:
        return
    block = min(1024, next_power_of_2(n))
    for_device(_silu_and_mul_kernel, x.device)[(out.shape[0], triton.cdiv(n, block))](
        out, x, n, x.stride(0), out.stride(0), BLOCK=block, num_warps=4,
    )


def rope_cache(theta: float, dim: int, max_positions: int, device: torch.device) -> torch.Tensor:
    """`[max_positions, dim]` fp32: cos of each position's angles, then their sin."""
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=1).float().to(device)
