"""The paged attention kernel: split-K items for short queries, query tiles for long chunks.

One launch serves decodes, short extends (a few new tokens over a long prefix, speculative
verification) and prefill chunks, as vLLM's unified attention does. Programs below
`large_programs` take a tile of LARGE_M new tokens of one query head of a long chunk (heaviest
tiles first, causal, no split); the rest take one work item of kernels/split_k.py: a key range
of one short sequence for one KV head, whose QT x QPK query rows (tokens x the query heads of
that KV head) share every K/V tile read. Either kind may be absent (HAS_SMALL / HAS_LARGE).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.attention_core import (
    attend,
    finish,
    key_lo,
    load_query,
    log2_sum_exp,
    v_head_offset,
)
from kernels.launch import round_to_bf16
from kernels.split_k import batch_chunk, locate, merge_partials, num_items, split_bounds


@triton.jit
def _init_rows(BLOCK_M: tl.constexpr, HEAD_SIZE: tl.constexpr):
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_SIZE], tl.float32)
    return m_i, l_i, acc


@triton.jit
def _row_sinks(sinks_ptr, heads, mask, HAS_SINK: tl.constexpr):
    if HAS_SINK:
        return tl.load(sinks_ptr + heads, mask=mask, other=float("-inf")) * 1.4426950408889634
    return tl.zeros(heads.shape, tl.float32)


@triton.jit
def _small_program(pid, out_ptr, part_ptr, lse_ptr, counter_ptr, q_ptr, k_ptr, v_ptr,
                   tables_ptr, lens_ptr, starts_ptr, sinks_ptr, num_seqs, target,
                   target_ragged, min_chunk, forced, window, chunk_size, scale_log2, cap_in,
                   cap_out, v_scale, stride_qt, stride_qh, stride_ot, stride_oh, stride_cb,
                   stride_ct, stride_vb, stride_bt, NUM_KV_HEADS: tl.constexpr, QPK: tl.constexpr,
                   QT: tl.constexpr, ROWS: tl.constexpr, RP: tl.constexpr,
                   BLOCK_M: tl.constexpr, HEAD_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                   BLOCK_N: tl.constexpr, SEQ_TILE: tl.constexpr, BLOCK_S: tl.constexpr,
                   Q_STARTS: tl.constexpr, USE_WINDOW: tl.constexpr, USE_CHUNK: tl.constexpr,
                   SOFT_CAP: tl.constexpr, HAS_SINK: tl.constexpr, FUSED: tl.constexpr,
                   UPCAST: tl.constexpr, FP8: tl.constexpr, ROUND_OUT: tl.constexpr,
                   SPLIT_P: tl.constexpr, DOT_PRECISION: tl.constexpr,
                   PIPE: tl.constexpr, V_T: tl.constexpr):
    kv_head = pid % NUM_KV_HEADS
    item = pid // NUM_KV_HEADS
    chunk = batch_chunk(lens_ptr, starts_ptr, num_seqs, target, target_ragged, min_chunk,
                        window, chunk_size, NUM_KV_HEADS, Q_STARTS, USE_WINDOW, USE_CHUNK,
                        BLOCK_N, SEQ_TILE)
    seq, first = locate(item, chunk, lens_ptr, starts_ptr, num_seqs, min_chunk, forced, window,
                        chunk_size, Q_STARTS, USE_WINDOW, USE_CHUNK, BLOCK_N, SEQ_TILE)
    if seq >= 0:
        ctx = tl.load(lens_ptr + seq)
        if Q_STARTS:
            q_start = tl.load(starts_ptr + seq)
            n_new = tl.load(starts_ptr + seq + 1) - q_start
        else:
            q_start = seq
            n_new = 1
        lo_seq = key_lo(ctx - n_new, window, chunk_size, USE_WINDOW, USE_CHUNK)
        n_splits = num_items(ctx - lo_seq, chunk, min_chunk, forced, BLOCK_N)
        lo, hi = split_bounds(lo_seq, ctx, item - first, n_splits, BLOCK_N)
        offs_r = tl.arange(0, BLOCK_M)
        tok = offs_r // QPK
        r_ok = (offs_r < ROWS) & (tok < n_new)
        heads = kv_head * QPK + offs_r % QPK
        offs_d = tl.arange(0, HEAD_SIZE)
        q_rows = (q_start + tok).to(tl.int64)
        q = tl.load(q_ptr + q_rows[:, None] * stride_qt + heads[:, None] * stride_qh
                    + offs_d[None, :], mask=r_ok[:, None], other=0.0)  # [BLOCK_M, HEAD_SIZE]
        q, q_gain = load_query(q, UPCAST, FP8 > 0)
        q_pos = ctx - n_new + tok
        row_lo = key_lo(q_pos, window, chunk_size, USE_WINDOW, USE_CHUNK)
        full_lo = key_lo(ctx - 1, window, chunk_size, USE_WINDOW, USE_CHUNK)
        m_i, l_i, acc = _init_rows(BLOCK_M, HEAD_SIZE)
        acc, m_i, l_i = attend(acc, m_i, l_i, q, lo, hi, full_lo, ctx - n_new + 1, q_pos,
                               row_lo, k_ptr + kv_head * HEAD_SIZE,
                               v_ptr + v_head_offset(kv_head, HEAD_SIZE, BLOCK_SIZE, V_T),
                               tables_ptr + seq.to(tl.int64) * stride_bt, offs_d,
                               scale_log2 * q_gain, cap_in * q_gain, cap_out, stride_cb, stride_ct,
                               stride_vb, BLOCK_SIZE, BLOCK_N, QT > 1, SOFT_CAP, UPCAST, SPLIT_P,
                               DOT_PRECISION, FP8, PIPE, V_T)
        if n_splits == 1:
            out = finish(acc, m_i, l_i, _row_sinks(sinks_ptr, heads, r_ok, HAS_SINK), v_scale,
                         HAS_SINK)
            if ROUND_OUT:
                out = round_to_bf16(out)
            tl.store(out_ptr + q_rows[:, None] * stride_ot + heads[:, None] * stride_oh
                     + offs_d[None, :], out.to(out_ptr.dtype.element_ty), mask=r_ok[:, None])
        else:
            idx = (item * NUM_KV_HEADS + kv_head).to(tl.int64) * ROWS + offs_r
            row_ok = offs_r < ROWS
            part = finish(acc, m_i, l_i, m_i, v_scale, False)
            tl.store(part_ptr + idx[:, None] * HEAD_SIZE + offs_d[None, :], part,
                     mask=row_ok[:, None])
            tl.store(lse_ptr + idx, log2_sum_exp(m_i, l_i), mask=row_ok)
            if FUSED:
                # Release this item's partials, then count arrivals; the last one merges.
                tl.debug_barrier()
                counter = counter_ptr + seq * NUM_KV_HEADS + kv_head
                if tl.atomic_add(counter, 1, sem="acq_rel") == n_splits - 1:
                    merge_partials(out_ptr, part_ptr, lse_ptr, sinks_ptr, first, n_splits,
                                   kv_head, q_start, n_new, 0, stride_ot, stride_oh,
                                   NUM_KV_HEADS, QPK, ROWS, RP, BLOCK_S, HEAD_SIZE, HAS_SINK,
                                   ROUND_OUT)
                    tl.atomic_xchg(counter, 0)


@triton.jit
def _large_program(pid, out_ptr, q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, starts_ptr,
                   sinks_ptr, seq0, num_large, m_blocks, window, chunk_size, scale_log2, cap_in,
                   cap_out, v_scale, stride_qt, stride_qh, stride_ot, stride_oh, stride_cb,
                   stride_ct, stride_vb, stride_bt, NUM_Q_HEADS: tl.constexpr, QPK: tl.constexpr,
                   HEAD_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, USE_WINDOW: tl.constexpr, USE_CHUNK: tl.constexpr,
                   SOFT_CAP: tl.constexpr, HAS_SINK: tl.constexpr, UPCAST: tl.constexpr,
                   FP8: tl.constexpr, ROUND_OUT: tl.constexpr, SPLIT_P: tl.constexpr,
                   DOT_PRECISION: tl.constexpr, V_T: tl.constexpr):
    q_head = pid % NUM_Q_HEADS
    tile = pid // NUM_Q_HEADS
    m_block = m_blocks - 1 - tile // num_large
    seq = seq0 + tile % num_large
    q_start = tl.load(starts_ptr + seq)
    n_new = tl.load(starts_ptr + seq + 1) - q_start
    if m_block * BLOCK_M < n_new:
        ctx = tl.load(lens_ptr + seq)
        kv_head = q_head // QPK
        offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_SIZE)
        m_mask = offs_m < n_new
        q_rows = (q_start + offs_m).to(tl.int64)
        q = tl.load(q_ptr + q_rows[:, None] * stride_qt + q_head * stride_qh + offs_d[None, :],
                    mask=m_mask[:, None], other=0.0)  # [BLOCK_M, HEAD_SIZE]
        q, q_gain = load_query(q, UPCAST, FP8 > 0)
        first_pos = ctx - n_new + m_block * BLOCK_M
        last_pos = ctx - n_new + tl.minimum((m_block + 1) * BLOCK_M, n_new) - 1
        q_pos = ctx - n_new + offs_m
        row_lo = key_lo(q_pos, window, chunk_size, USE_WINDOW, USE_CHUNK)
        m_i, l_i, acc = _init_rows(BLOCK_M, HEAD_SIZE)
        acc, m_i, l_i = attend(acc, m_i, l_i, q,
                               key_lo(first_pos, window, chunk_size, USE_WINDOW, USE_CHUNK),
                               last_pos + 1,
                               key_lo(last_pos, window, chunk_size, USE_WINDOW, USE_CHUNK),
                               first_pos + 1, q_pos, row_lo, k_ptr + kv_head * HEAD_SIZE,
                               v_ptr + v_head_offset(kv_head, HEAD_SIZE, BLOCK_SIZE, V_T),
                               tables_ptr + seq.to(tl.int64) * stride_bt, offs_d,
                               scale_log2 * q_gain, cap_in * q_gain, cap_out, stride_cb, stride_ct,
                               stride_vb, BLOCK_SIZE, BLOCK_N, True, SOFT_CAP, UPCAST, SPLIT_P,
                               DOT_PRECISION, FP8, False, V_T)
        sink = _row_sinks(sinks_ptr, q_head + offs_m * 0, m_mask, HAS_SINK)
        out = finish(acc, m_i, l_i, sink, v_scale, HAS_SINK)
        if ROUND_OUT:
            out = round_to_bf16(out)
        tl.store(out_ptr + q_rows[:, None] * stride_ot + q_head * stride_oh + offs_d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=m_mask[:, None])


_SCALARS = ["num_small", "target", "target_ragged", "min_chunk", "forced", "num_large", "m_blocks",
            "large_programs", "window", "chunk_size"]


@triton.jit(do_not_specialize=_SCALARS)
def paged_attention_kernel(
    out_ptr, part_ptr, lse_ptr, counter_ptr, q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr,
    starts_ptr, sinks_ptr, num_small, target, target_ragged, min_chunk, forced, num_large,
    m_blocks, large_programs, window, chunk_size, scale_log2, cap_in, cap_out, v_scale,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_ct, stride_vb, stride_bt,
    NUM_KV_HEADS: tl.constexpr, QPK: tl.constexpr, HEAD_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, QT: tl.constexpr, ROWS: tl.constexpr, RP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SEQ_TILE: tl.constexpr,
    BLOCK_S: tl.constexpr, FUSED: tl.constexpr, SPLIT_P: tl.constexpr, LARGE_M: tl.constexpr,
    LARGE_N: tl.constexpr, LARGE_SPLIT_P: tl.constexpr, HAS_SMALL: tl.constexpr,
    HAS_LARGE: tl.constexpr, Q_STARTS: tl.constexpr, USE_WINDOW: tl.constexpr,
    USE_CHUNK: tl.constexpr, SOFT_CAP: tl.constexpr, HAS_SINK: tl.constexpr,
    UPCAST: tl.constexpr, FP8: tl.constexpr, ROUND_OUT: tl.constexpr,
    DOT_PRECISION: tl.constexpr, PIPE: tl.constexpr, V_T: tl.constexpr,
):
    pid = tl.program_id(0)
    if HAS_LARGE:
        if pid < large_programs:
            _large_program(pid, out_ptr, q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, starts_ptr,
                           sinks_ptr, num_small, num_large, m_blocks, window, chunk_size,
                           scale_log2, cap_in, cap_out, v_scale, stride_qt, stride_qh,
                           stride_ot, stride_oh, stride_cb, stride_ct, stride_vb, stride_bt,
                           NUM_KV_HEADS * QPK, QPK, HEAD_SIZE, BLOCK_SIZE, LARGE_M, LARGE_N,
                           USE_WINDOW, USE_CHUNK, SOFT_CAP, HAS_SINK, UPCAST, FP8, ROUND_OUT,
                           LARGE_SPLIT_P, DOT_PRECISION, V_T)
        elif HAS_SMALL:
            _small_program(pid - large_programs, out_ptr, part_ptr, lse_ptr, counter_ptr, q_ptr,
                           k_ptr, v_ptr, tables_ptr, lens_ptr, starts_ptr, sinks_ptr, num_small,
                           target, target_ragged, min_chunk, forced, window, chunk_size,
                           scale_log2, cap_in, cap_out, v_scale, stride_qt, stride_qh,
                           stride_ot, stride_oh, stride_cb, stride_ct, stride_vb, stride_bt,
                           NUM_KV_HEADS, QPK, QT, ROWS, RP, BLOCK_M, HEAD_SIZE, BLOCK_SIZE,
                           BLOCK_N, SEQ_TILE, BLOCK_S, Q_STARTS, USE_WINDOW, USE_CHUNK, SOFT_CAP,
                           HAS_SINK, FUSED, UPCAST, FP8, ROUND_OUT, SPLIT_P, DOT_PRECISION, PIPE,
                           V_T)
    else:
        _small_program(pid, out_ptr, part_ptr, lse_ptr, counter_ptr, q_ptr, k_ptr, v_ptr,
                       tables_ptr, lens_ptr, starts_ptr, sinks_ptr, num_small, target,
                       target_ragged, min_chunk, forced, window, chunk_size, scale_log2, cap_in,
                       cap_out, v_scale, stride_qt, stride_qh, stride_ot, stride_oh, stride_cb,
                       stride_ct, stride_vb, stride_bt, NUM_KV_HEADS, QPK, QT, ROWS, RP, BLOCK_M,
                       HEAD_SIZE, BLOCK_SIZE, BLOCK_N, SEQ_TILE, BLOCK_S, Q_STARTS, USE_WINDOW,
                       USE_CHUNK, SOFT_CAP, HAS_SINK, FUSED, UPCAST, FP8, ROUND_OUT, SPLIT_P,
                       DOT_PRECISION, PIPE, V_T)


@triton.jit(do_not_specialize=["num_seqs", *_SCALARS[1:5], "window", "chunk_size"])
def merge_kernel(out_ptr, part_ptr, lse_ptr, sinks_ptr, lens_ptr, starts_ptr, num_seqs, target,
                 target_ragged, min_chunk, forced, window, chunk_size, stride_ot, stride_oh,
                 NUM_KV_HEADS: tl.constexpr, QPK: tl.constexpr, ROWS: tl.constexpr,
                 RT: tl.constexpr, BLOCK_S: tl.constexpr, HEAD_SIZE: tl.constexpr,
                 BLOCK_N: tl.constexpr, SEQ_TILE: tl.constexpr, Q_STARTS: tl.constexpr,
                 USE_WINDOW: tl.constexpr, USE_CHUNK: tl.constexpr, HAS_SINK: tl.constexpr,
                 ROUND_BF16: tl.constexpr):
    """The merge as a second launch (DecodeConfig(fused_reduce=False)): one program per
    (sequence, KV head, RT rows), finding the sequence's items as the attention programs did;
    several programs share a sequence's rows, where the fused merge has one."""
    blocks = (ROWS + RT - 1) // RT
    r0 = tl.program_id(0) % blocks * RT
    kv_head = tl.program_id(0) // blocks % NUM_KV_HEADS
    seq = tl.program_id(0) // blocks // NUM_KV_HEADS
    ctx = tl.load(lens_ptr + seq)
    if Q_STARTS:
        q_start = tl.load(starts_ptr + seq)
        n_new = tl.load(starts_ptr + seq + 1) - q_start
    else:
        q_start = seq
        n_new = 1
    chunk = batch_chunk(lens_ptr, starts_ptr, num_seqs, target, target_ragged, min_chunk,
                        window, chunk_size, NUM_KV_HEADS, Q_STARTS, USE_WINDOW, USE_CHUNK,
                        BLOCK_N, SEQ_TILE)
    _, first = locate(-1 - seq, chunk, lens_ptr, starts_ptr, num_seqs, min_chunk, forced,
                      window, chunk_size, Q_STARTS, USE_WINDOW, USE_CHUNK, BLOCK_N, SEQ_TILE)
    lo_seq = key_lo(ctx - n_new, window, chunk_size, USE_WINDOW, USE_CHUNK)
    n_splits = num_items(ctx - lo_seq, chunk, min_chunk, forced, BLOCK_N)
    if n_splits > 1:
        merge_partials(out_ptr, part_ptr, lse_ptr, sinks_ptr, first, n_splits, kv_head,
                       q_start, n_new, r0, stride_ot, stride_oh, NUM_KV_HEADS, QPK, ROWS, RT,
                       BLOCK_S, HEAD_SIZE, HAS_SINK, ROUND_BF16)
