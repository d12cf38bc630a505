"""Work split by tokens: the device-built work list of split-K items, and their merge.

Sequences with few new tokens (decodes, short extends) are cut into work items of (sequence,
key range), each run for every KV head by one program. The list is built inside the kernel,
with no host sync: every program reads all context lengths, totals the key tokens `T` the
batch attends to, and takes the chunk size

    chunk = max(min_chunk, ceil(T * num_kv_heads / target))        (rounded up to BLOCK_N)

so the batch makes about `target` (sequence, KV head, range) items of equal length whatever
its raggedness; sequence s gets n_s = ceil(span_s / chunk) items of whole tiles, none below
`min_chunk` tokens (`forced` > 0 fixes n_s instead). `split_rule` is the host's statement of
the rule for a uniform batch. Items are numbered sequence by sequence; a program finds its own
with a cumulative sum. A sequence with one item writes its output directly; otherwise each
item leaves its normalised rows and log2-sum-exp, and `merge_partials` combines them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.attention_core import key_lo
from kernels.launch import round_to_bf16


@triton.jit
def _spans(s0, lens_ptr, starts_ptr, num_seqs, window, chunk_size, Q_STARTS: tl.constexpr,
           USE_WINDOW: tl.constexpr, USE_CHUNK: tl.constexpr, SEQ_TILE: tl.constexpr):
    """Key tokens each sequence of a tile attends to (0 past the end or with no new token)."""
    offs = s0 + tl.arange(0, SEQ_TILE)
    ok = offs < num_seqs
    ctx = tl.load(lens_ptr + offs, mask=ok, other=0)
    if Q_STARTS:
        n_new = tl.load(starts_ptr + offs + 1, mask=ok, other=0) - tl.load(
            starts_ptr + offs, mask=ok, other=0)
    else:
        n_new = tl.full([SEQ_TILE], 1, tl.int32)
    lo = key_lo(ctx - n_new, window, chunk_size, USE_WINDOW, USE_CHUNK)
    return offs, tl.where(ok & (n_new > 0), ctx - lo, 0)


@triton.jit
def batch_chunk(lens_ptr, starts_ptr, num_seqs, target, target_ragged, min_chunk, window,
                chunk_size, NUM_KV_HEADS: tl.constexpr, Q_STARTS: tl.constexpr,
                USE_WINDOW: tl.constexpr, USE_CHUNK: tl.constexpr, BLOCK_N: tl.constexpr,
                SEQ_TILE: tl.constexpr):
    """The batch's chunk size. A ragged batch (longest span > 9/8 of the mean) divides its
    work by `target_ragged` instead of `target`, for shorter items: its tail then holds only
    short ones."""
    total = tl.zeros([SEQ_TILE], tl.int64)
    longest = tl.zeros([SEQ_TILE], tl.int32)
    active = tl.zeros([SEQ_TILE], tl.int32)
    for s0 in range(0, num_seqs, SEQ_TILE):
        _, span = _spans(s0, lens_ptr, starts_ptr, num_seqs, window, chunk_size, Q_STARTS,
                         USE_WINDOW, USE_CHUNK, SEQ_TILE)
        total += span.to(tl.int64)
        longest = tl.maximum(longest, span)
        active += (span > 0).to(tl.int32)
    tokens = tl.sum(total, 0)
    ragged = tl.max(longest, 0).to(tl.int64) * tl.sum(active, 0) * 8 > tokens * 9
    divisor = tl.where(ragged, target_ragged, target)
    chunk = tl.maximum((tokens * NUM_KV_HEADS + divisor - 1) // divisor, min_chunk)
    return ((chunk + BLOCK_N - 1) // BLOCK_N * BLOCK_N).to(tl.int32)


@triton.jit
def locate(item, chunk, lens_ptr, starts_ptr, num_seqs, min_chunk, forced, window, chunk_size,
           Q_STARTS: tl.constexpr, USE_WINDOW: tl.constexpr, USE_CHUNK: tl.constexpr,
           BLOCK_N: tl.constexpr, SEQ_TILE: tl.constexpr):
    """(seq, first item of seq) of work item `item`; seq is -1 past the list's end. With
    `item` = -1 - s, returns (-1, the first item of sequence s) instead."""
    base = tl.full([], 0, tl.int32)
    seq = tl.full([], -1, tl.int32)
    first = tl.full([], 0, tl.int32)
    for s0 in range(0, num_seqs, SEQ_TILE):
        offs, span = _spans(s0, lens_ptr, starts_ptr, num_seqs, window, chunk_size, Q_STARTS,
                            USE_WINDOW, USE_CHUNK, SEQ_TILE)
        n = num_items(span, chunk, min_chunk, forced, BLOCK_N)
        end = tl.cumsum(n, 0) + base
        hit = ((end > item) & (end - n <= item)) | (offs == -1 - item)
        found = tl.sum(hit.to(tl.int32), 0) > 0
        seq = tl.where(found & (item >= 0), tl.sum(tl.where(hit, offs, 0), 0), seq)
        first = tl.where(found, tl.sum(tl.where(hit, end - n, 0), 0), first)
        base += tl.sum(n, 0)
    return seq, first


@triton.jit
def num_items(span, chunk, min_chunk, forced, BLOCK_N: tl.constexpr):
    """Items of a sequence attending to `span` keys: ceil(span / chunk), but none shorter
    than `min_chunk` (at most floor(span / min_chunk), at least one); or `forced` ones."""
    if forced > 0:
        n = tl.minimum(forced, (span + BLOCK_N - 1) // BLOCK_N)
    else:
        n = tl.minimum((span + chunk - 1) // chunk, tl.maximum(span // min_chunk, 1))
    return tl.where(span > 0, n, 0)


@triton.jit
def split_bounds(lo, ctx, split, n_splits, BLOCK_N: tl.constexpr):
    """Key range [start, end) of item `split` of `n_splits` over [lo, ctx): whole tiles,
    item sizes differing by at most one tile (the last may end mid-tile)."""
    tiles = (ctx - lo + BLOCK_N - 1) // BLOCK_N
    start = lo + split * tiles // n_splits * BLOCK_N
    end = lo + (split + 1) * tiles // n_splits * BLOCK_N
    return start, tl.minimum(end, ctx)


@triton.jit
def _partials(part_ptr, lse_ptr, first, j0, n_splits, kv_head, j_f, r_f,
              NUM_KV_HEADS: tl.constexpr, ROWS: tl.constexpr, HEAD_SIZE: tl.constexpr):
    j = j0 + j_f
    ok = (r_f < ROWS) & (j < n_splits)
    idx = ((first + j) * NUM_KV_HEADS + kv_head).to(tl.int64) * ROWS + r_f
    lse = tl.load(lse_ptr + idx, mask=ok, other=float("-inf"), cache_modifier=".cg")
    offs_d = tl.arange(0, HEAD_SIZE)
    part = tl.load(part_ptr + idx[:, None] * HEAD_SIZE + offs_d[None, :], mask=ok[:, None],
                   other=0.0, cache_modifier=".cg")
    return lse, part


@triton.jit
def merge_partials(out_ptr, part_ptr, lse_ptr, sinks_ptr, first, n_splits, kv_head, q_start,
                   n_new, r0, stride_ot, stride_oh, NUM_KV_HEADS: tl.constexpr,
                   QPK: tl.constexpr, ROWS: tl.constexpr, RT: tl.constexpr,
                   BLOCK_S: tl.constexpr, HEAD_SIZE: tl.constexpr, HAS_SINK: tl.constexpr,
                   ROUND_BF16: tl.constexpr):
    """Softmax-weighted mean of rows r0 .. r0 + RT of a sequence's items, BLOCK_S items per
    (prefetched) load:

    out = sum_j 2^(lse_j - M) o_j / (sum_j 2^(lse_j - M) [+ 2^(sink - M)])
    """
    offs_f = tl.arange(0, BLOCK_S * RT)
    j_f = offs_f // RT
    r_f = r0 + offs_f % RT
    m_run = tl.full([RT], float("-inf"), tl.float32)
    w_sum = tl.zeros([RT], tl.float32)
    merged = tl.zeros([RT, HEAD_SIZE], tl.float32)
    lse_n, part_n = _partials(part_ptr, lse_ptr, first, 0, n_splits, kv_head, j_f, r_f,
                              NUM_KV_HEADS, ROWS, HEAD_SIZE)
    for j0 in range(0, n_splits, BLOCK_S):
        lse, part = lse_n, part_n
        lse_n, part_n = _partials(part_ptr, lse_ptr, first, j0 + BLOCK_S, n_splits, kv_head,
                                  j_f, r_f, NUM_KV_HEADS, ROWS, HEAD_SIZE)
        lse2 = tl.reshape(lse, (BLOCK_S, RT))
        m_new = tl.maximum(m_run, tl.max(lse2, 0))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        keep = tl.exp2(m_run - m_ref)
        w = tl.exp2(lse2 - m_ref[None, :])
        part3 = tl.reshape(part, (BLOCK_S, RT, HEAD_SIZE))
        merged = merged * keep[:, None] + tl.sum(part3 * w[:, :, None], 0)
        w_sum = w_sum * keep + tl.sum(w, 0)
        m_run = m_new
    offs_r = r0 + tl.arange(0, RT)
    heads = kv_head * QPK + offs_r % QPK
    tok = offs_r // QPK
    if HAS_SINK:
        sink = tl.load(sinks_ptr + heads, mask=offs_r < ROWS, other=float("-inf"))
        sink = sink * 1.4426950408889634
        m_new = tl.maximum(m_run, sink)
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        keep = tl.exp2(m_run - m_ref)
        merged = merged * keep[:, None]
        w_sum = w_sum * keep + tl.exp2(sink - m_ref)
    out = merged / tl.where(w_sum > 0, w_sum, 1.0)[:, None]
    if ROUND_BF16:
        out = round_to_bf16(out)
    o_ptrs = (out_ptr + (q_start + tok).to(tl.int64)[:, None] * stride_ot
              + heads[:, None] * stride_oh + tl.arange(0, HEAD_SIZE)[None, :])
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty),
             mask=((offs_r < ROWS) & (tok < n_new))[:, None])


def merge_block(padded_rows: int, head_size: int, budget: int) -> int:
    """Items merged per load: as many as fit `budget` fp32 elements (a power of two, >= 1)."""
    fit = max(1, budget // (padded_rows * head_size))
    return 1 << (fit.bit_length() - 1)


def split_rule(num_seqs: int, num_kv_heads: int, span: int, block_n: int, target: int,
               min_chunk: int) -> int:
    """Items per sequence that `locate` gives a uniform batch (`num_seqs` spans of `span`)."""
    chunk = max(-(-num_seqs * span * num_kv_heads // target), min_chunk)
    chunk = -(-chunk // block_n) * block_n
    return max(1, min(-(-span // chunk), max(span // min_chunk, 1)))
