"""The previous paged decode kernel (one program per sequence, KV head and split), for A/B runs.

benchmarks/bench_kernels.py --ab times it against kernels/decode_attention.py alternately in one
call (figures of 2026-12-01 in benchmarks/RESULTS.md); it goes, with --ab's v1 column, once that
comparison is no longer needed. Its text:

A program owns one (KV head, sequence, split): it loads the query heads that share the KV head
(GQA/MQA: `num_q_heads // num_kv_heads` rows, padded to 16 for tensor-core dots) and streams
the keys and values of its token range in tiles of `BLOCK_N` tokens. A tile may span several
pages; each token finds its page through the block table:

    token t  ->  block_tables[seq][t // block_size], row t % block_size

so one tile of 64 tokens with block size 16 reads four pages. Online softmax (base 2) keeps
the running max and sum; bf16 probabilities go through the P.V dot as two bf16 terms (see
`launch.split_p`). With split-K each program leaves a normalised partial output and its
log2-sum-exp; the last program of a (sequence, KV head) to arrive (an atomic counter, left at
zero again) merges them, or kernels/decode_reduce.py does it in a second launch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from kernels.decode_config import DecodeConfig, split_span
from kernels.decode_reduce import reduce_splits
from kernels.launch import (
    SUPPORTED_DTYPES,
    accumulate_pv,
    as_block_tables,
    as_int_tensor,
    check_head_size,
    check_kv_cache,
    dot_precision,
    for_device,
    num_sms,
    round_to_bf16,
    split_p,
)

LOG2E = 1.4426950408889634


# fmt: off
@triton.jit
def _paged_decode_kernel(
    out_ptr,  # [num_seqs, NUM_Q_HEADS, HEAD_SIZE]
    part_ptr,  # [num_seqs, NUM_Q_HEADS, num_splits, HEAD_SIZE] fp32, split-K only
    lse_offset,  # log2-sum-exps [num_seqs, NUM_Q_HEADS, num_splits] start at part_ptr + this
    counter_ptr,  # [num_seqs, NUM_KV_HEADS] int32 zeros, fused split-K only
    q_ptr,  # [num_seqs, NUM_Q_HEADS, HEAD_SIZE]
    k_cache_ptr, v_cache_ptr,  # [num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE], same strides
    block_tables_ptr,  # [num_seqs, max_blocks] int32
    context_lens_ptr,  # [num_seqs] int32
    scale_log2, sliding_window, tokens_per_split,
    stride_qs, stride_os, stride_cb, stride_ct, stride_bt,
    NUM_KV_HEADS: tl.constexpr, QUERIES_PER_KV: tl.constexpr, BLOCK_Q: tl.constexpr,
    HEAD_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    USE_SPLITS: tl.constexpr, FUSED_REDUCE: tl.constexpr, USE_WINDOW: tl.constexpr,
    DOT_PRECISION: tl.constexpr, SPLIT_P: tl.constexpr, UPCAST_DOT: tl.constexpr,
):
    kv_head = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)
    ctx_len = tl.load(context_lens_ptr + seq)
    lo = split * tokens_per_split
    if USE_WINDOW:
        lo += tl.maximum(ctx_len - sliding_window, 0)
    hi = tl.minimum(lo + tokens_per_split, ctx_len)

    offs_g = tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, HEAD_SIZE)
    g_mask = offs_g < QUERIES_PER_KV
    q_heads = kv_head * QUERIES_PER_KV + offs_g
    q = tl.load(q_ptr + seq * stride_qs + q_heads[:, None] * HEAD_SIZE + offs_d[None, :],
                mask=g_mask[:, None], other=0.0)  # [BLOCK_Q, HEAD_SIZE]
    if UPCAST_DOT:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, HEAD_SIZE], tl.float32)
    table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    head_off = kv_head * HEAD_SIZE
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        n_mask = offs_n < hi
        block_id = tl.load(table_row + offs_n // BLOCK_SIZE, mask=n_mask, other=0).to(tl.int64)
        rows = (block_id * stride_cb + (offs_n % BLOCK_SIZE) * stride_ct + head_off)[:, None]
        k = tl.load(k_cache_ptr + rows + offs_d[None, :], mask=n_mask[:, None], other=0.0)
        if UPCAST_DOT:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2  # [BLOCK_Q, BLOCK_N]
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_cache_ptr + rows + offs_d[None, :], mask=n_mask[:, None], other=0.0)
        acc = acc * alpha[:, None]
        acc = accumulate_pv(acc, p, v, UPCAST_DOT, SPLIT_P, DOT_PRECISION)
        m_i = m_new

    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    o_ptrs = out_ptr + seq * stride_os + q_heads[:, None] * HEAD_SIZE + offs_d[None, :]
    if USE_SPLITS:
        lse_ptr = part_ptr + lse_offset
        num_splits = tl.num_programs(2)
        first = (seq * (NUM_KV_HEADS * QUERIES_PER_KV) + q_heads) * num_splits  # [BLOCK_Q]
        tl.store(part_ptr + (first + split)[:, None] * HEAD_SIZE + offs_d[None, :], out,
                 mask=g_mask[:, None])
        tl.store(lse_ptr + first + split, tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf")),
                 mask=g_mask)
        if FUSED_REDUCE:
            # Release this program's partials, then count arrivals; the last one merges.
            tl.debug_barrier()
            counter = counter_ptr + seq * NUM_KV_HEADS + kv_head
            if tl.atomic_add(counter, 1, sem="acq_rel") == num_splits - 1:
                m_run = tl.full([BLOCK_Q], float("-inf"), tl.float32)
                w_sum = tl.zeros([BLOCK_Q], tl.float32)
                merged = tl.zeros([BLOCK_Q, HEAD_SIZE], tl.float32)
                for j in range(num_splits):
                    lse_j = tl.load(lse_ptr + first + j, mask=g_mask, other=float("-inf"),
                                    cache_modifier=".cg")
                    part_j = tl.load(part_ptr + (first + j)[:, None] * HEAD_SIZE + offs_d[None, :],
                                     mask=g_mask[:, None], other=0.0, cache_modifier=".cg")
                    m_new = tl.maximum(m_run, lse_j)
                    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
                    keep = tl.exp2(m_run - m_ref)
                    w = tl.exp2(lse_j - m_ref)
                    merged = merged * keep[:, None] + part_j * w[:, None]
                    w_sum = w_sum * keep + w
                    m_run = m_new
                merged = merged / tl.where(w_sum > 0, w_sum, 1.0)[:, None]
                if UPCAST_DOT:
                    merged = round_to_bf16(merged)
                tl.store(o_ptrs, merged.to(out_ptr.dtype.element_ty), mask=g_mask[:, None])
                tl.atomic_xchg(counter, 0)
    else:
        if UPCAST_DOT:
            out = round_to_bf16(out)
        tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=g_mask[:, None])
# fmt: on


# Split-K scratch per device: partial outputs/log-sum-exps and the arrival counters. Grown on
# demand and never freed, since a captured CUDA graph may still point at an older buffer. The
# counters are zero between calls (each merging program resets its own), which is why split-K
# calls on one device must be stream-ordered.
_SCRATCH_V1: dict[torch.device, list[tuple[torch.Tensor, torch.Tensor]]] = {}


def _v1_num_splits(num_seqs: int, num_kv_heads: int, span: int, block_n: int, sms: int) -> int:
    """The previous split heuristic: fill 3 programs per SM, at least 512 tokens per split."""
    base = max(1, num_seqs * num_kv_heads)
    if base >= 3 * sms:
        return 1
    return max(1, min(-(-3 * sms // base), max(1, span // max(512, block_n))))


def _v1_config(head_size: int, dtype: torch.dtype, split: bool) -> DecodeConfig:
    if dtype == torch.float32:
        return DecodeConfig(block_n=16, num_warps=4, num_stages=2)
    if head_size > 128:
        return DecodeConfig(block_n=32, num_warps=4, num_stages=2)
    return DecodeConfig(block_n=64, num_warps=4 if split else 2, num_stages=2)


def _split_scratch(device: torch.device, floats: int, counters: int) -> tuple[torch.Tensor, ...]:
    held = _SCRATCH_V1.setdefault(device, [])
    if held and held[-1][0].numel() >= floats and held[-1][1].numel() >= counters:
        return held[-1]
    old_f, old_c = (held[-1][0].numel(), held[-1][1].numel()) if held else (0, 0)
    pair = (
        torch.empty(max(floats, 2 * old_f), dtype=torch.float32, device=device),
        torch.zeros(max(counters, 2 * old_c), dtype=torch.int32, device=device),
    )
    held.append(pair)
    return pair


def _check_inputs(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor | None
) -> tuple[int, int, int]:
    """Validate q/out/caches; return (block_size, num_kv_heads, head_size).

    One cheap test covers the common case; the detailed checks run only to name a failure.
    """
    ks = k_cache.stride()
    shape = k_cache.shape
    head_size = shape[-1]
    if (
        len(shape) == 4
        and v_cache.shape == shape
        and v_cache.stride() == ks
        and ks[2:] == (head_size, 1)
        and q.dtype == k_cache.dtype == v_cache.dtype
        and q.device == k_cache.device == v_cache.device
        and q.dim() == 3
        and q.shape[2] == head_size
        and q.shape[1] % shape[2] == 0
        and q.stride()[1:] == (head_size, 1)
        and head_size in (16, 32, 64, 128, 256)
        and q.dtype in SUPPORTED_DTYPES
        and (out is None or (out.shape == q.shape and out.dtype == q.dtype
                             and out.stride()[1:] == (head_size, 1)))
    ):  # fmt: skip
        return shape[1], shape[2], head_size
    _, _, num_kv_heads, head_size = check_kv_cache(k_cache, v_cache)
    check_head_size(head_size)
    if q.dim() != 3 or q.shape[2] != head_size or q.shape[1] % num_kv_heads:
        raise ValueError(
            f"q: expected [num_seqs, k*{num_kv_heads}, {head_size}], got {tuple(q.shape)}"
        )
    if q.dtype != k_cache.dtype or q.device != k_cache.device:
        raise ValueError(f"q: dtype/device {q.dtype}/{q.device} differ from the cache's")
    if q.stride()[1:] != (head_size, 1):
        raise ValueError("q: each token's [num_q_heads, head_size] must be contiguous")
    if k_cache.stride() != v_cache.stride() or k_cache.stride()[2] != head_size:
        raise ValueError("caches: K and V need equal strides with contiguous [heads, head_size]")
    raise ValueError(f"out: expected {tuple(q.shape)} {q.dtype} with contiguous heads")


def paged_decode_attention_v1(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor | Sequence[Sequence[int]],
    context_lens: torch.Tensor | Sequence[int],
    *,
    scale: float | None = None,
    sliding_window: int | None = None,
    max_context_len: int | None = None,
    num_splits: int | None = None,
    config: DecodeConfig | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The previous kernel, same arguments as kernels.decode_attention.paged_decode_attention."""
    block_size, num_kv_heads, head_size = _check_inputs(q, k_cache, v_cache, out)
    num_seqs, num_q_heads, _ = q.shape
    device = q.device
    tables = as_block_tables(block_tables, device)
    lens = as_int_tensor(context_lens, device, "context_lens")
    if tables.shape[0] != num_seqs or lens.shape[0] != num_seqs:
        raise ValueError(f"{num_seqs} queries, {tables.shape[0]} tables, {lens.shape[0]} lengths")
    out = torch.empty_like(q) if out is None else out
    if num_seqs == 0:
        return out
    if max_context_len is None:
        max_context_len = int(lens.max().item())
    span = split_span(max_context_len, sliding_window)
    block_n = config.block_n if config else _v1_config(head_size, q.dtype, True).block_n
    if num_splits is None:
        num_splits = _v1_num_splits(num_seqs, num_kv_heads, span, block_n, num_sms(device))
    tiles = -(-span // block_n)
    tokens_per_split = -(-tiles // max(1, num_splits)) * block_n
    num_splits = -(-span // tokens_per_split)
    cfg = config or _v1_config(head_size, q.dtype, num_splits > 1)
    partial, counters, rows = out, out, 0
    if num_splits > 1:
        rows = num_seqs * num_q_heads * num_splits
        partial, counters = _split_scratch(device, rows * (head_size + 1), num_seqs * num_kv_heads)
    group = num_q_heads // num_kv_heads
    stride_cb, stride_ct = k_cache.stride()[:2]
    dtype = q.dtype
    upcast = dtype == torch.bfloat16 and device.type == "cpu"  # see launch.upcast_dot
    # fmt: off
    for_device(_paged_decode_kernel, device)[(num_kv_heads, num_seqs, num_splits)](
        out, partial, rows * head_size, counters, q, k_cache, v_cache, tables, lens,
        (head_size**-0.5 if scale is None else scale) * LOG2E, sliding_window or 0,
        tokens_per_split, q.stride()[0], out.stride()[0], stride_cb, stride_ct, tables.stride()[0],
        NUM_KV_HEADS=num_kv_heads, QUERIES_PER_KV=group,
        BLOCK_Q=max(16, 1 << (group - 1).bit_length()),
        HEAD_SIZE=head_size, BLOCK_SIZE=block_size, BLOCK_N=cfg.block_n,
        USE_SPLITS=num_splits > 1, FUSED_REDUCE=cfg.fused_reduce, USE_WINDOW=bool(sliding_window),
        DOT_PRECISION=dot_precision(dtype), SPLIT_P=split_p(dtype), UPCAST_DOT=upcast,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    # fmt: on
    if num_splits > 1 and not cfg.fused_reduce:
        reduce_splits(
            out,
            partial[: rows * head_size].view(num_seqs, num_q_heads, num_splits, head_size),
            partial[rows * head_size : rows * (head_size + 1)].view(num_seqs, num_q_heads, -1),
        )
    return out
