"""Paged prefill/extend attention: a chunk of new tokens per sequence over its paged context.

Chunked prefill and prefix-cache hits both leave a sequence with `prefix` tokens already in the
paged cache and `n` new ones, whose K/V reshape_and_cache has just written behind them. The
causal mask is aligned to the end of the context:

    keys:    0 ............ prefix-1 | prefix ......... ctx-1
    query i (0 <= i < n) sits at position prefix + i and sees keys 0 .. prefix + i

A program owns BLOCK_M new tokens of one (sequence, query head) and streams keys in tiles of
BLOCK_N tokens through the block table (token t: block `table[t // block_size]`, row
`t % block_size`), stopping at the last key its last row can see. Heaviest tiles launch first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.launch import (
    accumulate_pv,
    as_block_tables,
    as_int_tensor,
    check_head_size,
    check_kv_cache,
    dot_precision,
    for_device,
    round_to_bf16,
    upcast_dot,
)

LOG2E = 1.4426950408889634


@dataclass(frozen=True, slots=True)
class PrefillConfig:
    """Query rows and key tokens per tile, and Triton launch options.

    `split_p` sends bf16 probabilities through the P.V dot as a hi+lo pair (see
    `launch.split_p`). Off by default here: on the H200 benchmark (8 x 2048 new over 2048
    cached) it cost 35% (4.07 vs 3.01 ms) for an error of 3.4e-3 instead of 4.0e-3 against
    float64, where SDPA's flash kernel has 4.2e-3.
    """

    block_m: int = 128
    block_n: int = 64
    num_warps: int = 8
    num_stages: int = 3
    split_p: bool = False

    def __post_init__(self) -> None:
        for v in (self.block_m, self.block_n):
            if v < 16 or v & (v - 1):
                raise ValueError(f"tile size {v}: need a power of two >= 16")


def default_prefill_config(head_size: int, dtype: torch.dtype) -> PrefillConfig:
    """Tiles sized so that q, the accumulator and the K/V stages fit on one SM without spills.

    16-bit: 128 x 128 with 8 warps and 3 stages was the fastest of eight configurations on the
    H200 benchmark (2.84 ms for 8 x 2048 new over 2048 cached; 128 x 64: 3.04 ms). fp32 uses
    IEEE dots on the FMA units, which need far more registers: small tiles (no spills in the
    sm_90 build, checked with cuobjdump).
    """
    if dtype == torch.float32:
        if head_size <= 128:
            return PrefillConfig(block_m=32, block_n=16, num_warps=4, num_stages=2)
        return PrefillConfig(block_m=16, block_n=16, num_warps=4, num_stages=2)
    if head_size <= 128:
        return PrefillConfig(block_m=128, block_n=128, num_warps=8, num_stages=3)
    return PrefillConfig(block_m=64, block_n=32, num_warps=4, num_stages=3)


@triton.jit
def _paged_prefill_kernel(
    out_ptr,  # [num_tokens, num_q_heads, HEAD_SIZE]
    q_ptr,  # [num_tokens, num_q_heads, HEAD_SIZE]
    k_cache_ptr,  # [num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_SIZE]
    v_cache_ptr,
    block_tables_ptr,  # [num_seqs, max_blocks] int32
    query_start_loc_ptr,  # [num_seqs + 1] int32
    context_lens_ptr,  # [num_seqs] int32
    scale_log2,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_bt,
    stride_ot,
    stride_oh,
    QUERIES_PER_KV: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    SPLIT_P: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    m_block = tl.num_programs(0) - 1 - tl.program_id(0)
    seq = tl.program_id(1)
    q_head = tl.program_id(2)
    q_start = tl.load(query_start_loc_ptr + seq)
    num_new = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if m_block * BLOCK_M >= num_new:
        return
    ctx_len = tl.load(context_lens_ptr + seq)
    kv_head = q_head // QUERIES_PER_KV
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_SIZE)
    m_mask = offs_m < num_new
    q_rows = (q_start + offs_m).to(tl.int64)
    q = tl.load(
        q_ptr + q_rows[:, None] * stride_qt + q_head * stride_qh + offs_d[None, :],
        mask=m_mask[:, None],
        other=0.0,
    )  # [BLOCK_M, HEAD_SIZE]
    if UPCAST_DOT:
        q = q.to(tl.float32)
    q_pos = ctx_len - num_new + offs_m
    hi = tl.minimum(ctx_len - num_new + (m_block + 1) * BLOCK_M, ctx_len)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_SIZE], tl.float32)
    table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    k_head = k_cache_ptr + kv_head * stride_kh
    v_head = v_cache_ptr + kv_head * stride_vh
    for start in range(0, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        n_mask = offs_n < hi
        block_id = tl.load(table_row + offs_n // BLOCK_SIZE, mask=n_mask, other=0).to(tl.int64)
        row = offs_n % BLOCK_SIZE
        k = tl.load(
            k_head + (block_id * stride_kb + row * stride_kt)[:, None] + offs_d[None, :],
            mask=n_mask[:, None],
            other=0.0,
        )  # [BLOCK_N, HEAD_SIZE]
        if UPCAST_DOT:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2  # [BLOCK_M, BLOCK_N]
        s = tl.where(offs_n[None, :] <= q_pos[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_head + (block_id * stride_vb + row * stride_vt)[:, None] + offs_d[None, :],
            mask=n_mask[:, None],
            other=0.0,
        )  # [BLOCK_N, HEAD_SIZE]
        acc = acc * alpha[:, None]
        acc = accumulate_pv(acc, p, v, UPCAST_DOT, SPLIT_P, DOT_PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    if UPCAST_DOT:
        out = round_to_bf16(out)
    tl.store(
        out_ptr + q_rows[:, None] * stride_ot + q_head * stride_oh + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None],
    )


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor | Sequence[Sequence[int]],
    query_start_loc: torch.Tensor | Sequence[int],
    context_lens: torch.Tensor | Sequence[int],
    *,
    scale: float | None = None,
    max_new_tokens: int | None = None,
    config: PrefillConfig | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's new tokens over its whole paged context.

    Args:
        q: `[num_tokens, num_q_heads, head_size]`, the new tokens of all sequences packed.
        k_cache, v_cache: `[num_blocks, block_size, num_kv_heads, head_size]`, already holding
            the new tokens' K/V.
        block_tables: per-sequence physical block ids (list of lists or int32 tensor).
        query_start_loc: `[num_seqs + 1]` offsets of each sequence's tokens in `q`.
        context_lens: `[num_seqs]` context length including the new tokens.
        scale: softmax scale, default `head_size ** -0.5`.
        max_new_tokens: most new tokens of any sequence (pass it to avoid a device sync).
        config: tile shape and launch options; default `default_prefill_config`.
        out: optional output buffer shaped like `q`.

    Returns:
        `[num_tokens, num_q_heads, head_size]` in q's dtype.

    Raises:
        ValueError: on shape, dtype, device or stride mismatches.
    """
    _, block_size, num_kv_heads, head_size = check_kv_cache(k_cache, v_cache)
    check_head_size(head_size)
    if q.dim() != 3 or q.shape[2] != head_size or q.shape[1] % num_kv_heads or q.stride(2) != 1:
        raise ValueError(
            f"q: expected [num_tokens, k*{num_kv_heads}, {head_size}] with contiguous heads, "
            f"got {tuple(q.shape)}"
        )
    if q.dtype != k_cache.dtype or q.device != k_cache.device:
        raise ValueError(f"q: dtype/device {q.dtype}/{q.device} differ from the cache's")
    tables = as_block_tables(block_tables, q.device)
    starts = as_int_tensor(query_start_loc, q.device, "query_start_loc")
    lens = as_int_tensor(context_lens, q.device, "context_lens")
    num_seqs = lens.numel()
    if starts.numel() != num_seqs + 1 or tables.shape[0] != num_seqs:
        raise ValueError(
            f"{num_seqs} context lengths, {starts.numel()} start offsets, {tables.shape[0]} tables"
        )
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(2) != 1:
        raise ValueError(f"out: expected {tuple(q.shape)} {q.dtype} with contiguous heads")
    if num_seqs == 0 or q.shape[0] == 0:
        return out
    if max_new_tokens is None:
        max_new_tokens = int((starts[1:] - starts[:-1]).max().item())
    cfg = config or default_prefill_config(head_size, q.dtype)
    scale = head_size**-0.5 if scale is None else scale
    grid = (triton.cdiv(max(max_new_tokens, 1), cfg.block_m), num_seqs, q.shape[1])
    for_device(_paged_prefill_kernel, q.device)[grid](
        out,
        q,
        k_cache,
        v_cache,
        tables,
        starts,
        lens,
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        tables.stride(0),
        out.stride(0),
        out.stride(1),
        QUERIES_PER_KV=q.shape[1] // num_kv_heads,
        HEAD_SIZE=head_size,
        BLOCK_SIZE=block_size,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        DOT_PRECISION=dot_precision(q.dtype),
        SPLIT_P=cfg.split_p,
        UPCAST_DOT=upcast_dot(q),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out
