"""Building blocks of the paged attention kernel: a tile of keys, a key range, finishing rows.

A program holds BLOCK_M query rows (each a (query token, query head) pair of one KV head) and
streams keys through the block table in tiles of BLOCK_N tokens,

    token t  ->  block_tables[seq][t // BLOCK_SIZE], row t % BLOCK_SIZE

with an online softmax in base 2 (running max `m`, sum `l`, accumulator `acc`). Row r sees
key j iff row_lo[r] <= j <= q_pos[r] (causal, and a sliding window or a local-attention chunk
from `key_lo`). `attend` runs the keys that every row sees without any mask and masks only
the edges. Scores may be soft-capped (Gemma 2); fp8 keys and values are widened to the query
dtype (exact), their scales folded into `scale_log2` and `v_scale` by the caller. V may be
stored transposed per block (kernels/cache_layout.py): `_v_tile` reads either layout.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.fp8 import widen_e4m3
from kernels.launch import accumulate_pv

LOG2E = 1.4426950408889634  # host side; jit code writes the literal


@triton.jit
def key_lo(pos, window, chunk, USE_WINDOW: tl.constexpr, USE_CHUNK: tl.constexpr):
    """First key a query at `pos` sees: its sliding window's and its local chunk's start."""
    lo = pos * 0
    if USE_WINDOW:
        lo = tl.maximum(pos - window + 1, 0)
    if USE_CHUNK:
        lo = tl.maximum(lo, pos // chunk * chunk)
    return lo


@triton.jit
def load_query(q, UPCAST: tl.constexpr, Q16: tl.constexpr):
    """Queries as the dots take them, and the factor the scores must be multiplied by.

    Q16 (fp8 caches): fp16 times 2^-s, s >= 0 the least keeping max|q| below 2^15, so the fp8
    keys and values widen to fp16 in one instruction (e4m3 is a subset of fp16; to bf16 takes
    three) and the dots run in fp16; 2^s comes back into the scores. UPCAST (bf16 under the
    interpreter): fp32.
    """
    gain = 1.0
    if Q16:
        amax = tl.max(tl.max(tl.abs(q.to(tl.float32)), 1), 0)
        s = tl.maximum(((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 141, 0)
        down = ((127 - s) << 23).to(tl.float32, bitcast=True)
        gain = ((127 + s) << 23).to(tl.float32, bitcast=True)
        q = (q.to(tl.float32) * down).to(tl.float16)
    elif UPCAST:
        q = q.to(tl.float32)
    return q, gain


@triton.jit
def softcap_log2(s, cap_in, cap_out):
    """`cap * tanh(s * scale / cap)` in base 2, for cap_in = 2 log2(e) scale / cap and
    cap_out = cap log2(e): tanh|x| = (1 - t) / (1 + t) with t = exp(-2|x|), never overflowing."""
    u = s * cap_in
    t = tl.exp2(-tl.abs(u))
    th = (1.0 - t) / (1.0 + t)
    return tl.where(u < 0, -th, th) * cap_out


@triton.jit
def read_table(ptrs):
    """Block-table entries at `ptrs` read through PTX (`ld.global.nc`, compiled kernels
    only), a load Triton's pipeliner does not see (`_kv_rows`); the caller keeps `ptrs`
    inside the table."""
    return tl.inline_asm_elementwise("ld.global.nc.b32 $0, [$1];", "=r,l", [ptrs],
                                     dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _kv_rows(table_row, offs_n, stride_cb, stride_ct, BLOCK_SIZE: tl.constexpr,
             MASK_KEYS: tl.constexpr, hi, TABLE_ASM: tl.constexpr = False):
    """Cache row offsets `[BLOCK_N, 1]` of tokens `offs_n` through the block table.

    TABLE_ASM (compiled kernels only) reads the table through PTX: Triton's pipeliner then no
    longer sees K/V addresses that hang on a load of the same iteration and, with num_stages
    >= 3, keeps num_stages - 1 K/V tiles in flight instead of one (which it otherwise fetches
    only after the current tile has been read). The pipeliner predicates the K/V loads of
    iterations past the loop's end but not this PTX load, which runs for them too: its token
    index is clamped into [0, hi), so it never reads past the row's last valid entry (a no-op
    for the tiles the loop really runs, whose tokens are all below `hi`).
    """
    if MASK_KEYS:
        block_id = tl.load(table_row + offs_n // BLOCK_SIZE, mask=offs_n < hi, other=0)
    elif TABLE_ASM:
        inside = tl.maximum(tl.minimum(offs_n, hi - 1), 0)
        block_id = read_table(table_row + inside // BLOCK_SIZE)
    else:
        block_id = tl.load(table_row + offs_n // BLOCK_SIZE)
    return (block_id.to(tl.int64) * stride_cb + (offs_n % BLOCK_SIZE) * stride_ct)[:, None]


@triton.jit
def v_head_offset(kv_head, HEAD_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                  V_T: tl.constexpr):
    """Offset of a KV head's first element in a block of V (of K: V_T = 0)."""
    if V_T:
        return kv_head * (HEAD_SIZE * BLOCK_SIZE)
    return kv_head * HEAD_SIZE


@triton.jit
def _table_entries(table_row, offs_b, hi, BLOCK_SIZE: tl.constexpr, MASK_KEYS: tl.constexpr,
                   TABLE_ASM: tl.constexpr):
    """Block ids of a row's blocks `offs_b` (0 for blocks past token `hi` if MASK_KEYS), read
    as `_kv_rows` reads token rows' ids."""
    if MASK_KEYS:
        block_id = tl.load(table_row + offs_b, mask=offs_b * BLOCK_SIZE < hi, other=0)
    elif TABLE_ASM:
        block_id = read_table(table_row + tl.maximum(tl.minimum(offs_b, (hi - 1) // BLOCK_SIZE),
                                                     0))
    else:
        block_id = tl.load(table_row + offs_b)
    return block_id.to(tl.int64)


@triton.jit
def _v_slices(v_head, table_row, start, hi, offs_d, stride_vb, BLOCK_SIZE: tl.constexpr,
              NB: tl.constexpr, SPAN: tl.constexpr, MASK_KEYS: tl.constexpr,
              TABLE_ASM: tl.constexpr):
    """Tokens [start, start + NB * SPAN) of a transposed V as `[NB * SPAN, head_size]`: NB
    blocks' `[head_size, SPAN]` slices, block ids along their own axis, so each slice is seen
    as contiguous tokens (read through the table token by token, a tile of this layout is
    fetched a byte at a time). `start` is a multiple of SPAN, which is BLOCK_SIZE if NB > 1."""
    offs_b = start // BLOCK_SIZE + tl.arange(0, NB)
    offs_s = start % BLOCK_SIZE + tl.arange(0, SPAN)
    blk = _table_entries(table_row, offs_b, hi, BLOCK_SIZE, MASK_KEYS, TABLE_ASM)
    ptrs = (v_head + blk[:, None, None] * stride_vb + (offs_d * BLOCK_SIZE)[None, :, None]
            + offs_s[None, None, :])  # [NB, head_size, SPAN]
    if MASK_KEYS:
        tok = (offs_b * BLOCK_SIZE)[:, None, None] + offs_s[None, None, :]
        vt = tl.load(ptrs, mask=tok < hi, other=0.0)
    else:
        vt = tl.load(ptrs)
    return tl.reshape(tl.permute(vt, (0, 2, 1)), (NB * SPAN, offs_d.shape[0]))


@triton.jit
def _v_tile(v_head, rows, table_row, start, hi, offs_d, stride_vb, BLOCK_SIZE: tl.constexpr,
            BLOCK_N: tl.constexpr, MASK_KEYS: tl.constexpr, TABLE_ASM: tl.constexpr,
            V_T: tl.constexpr):
    """V of tokens [start, start + BLOCK_N) as `[BLOCK_N, head_size]`, zero past `hi` if
    MASK_KEYS. V_T 0: token-major, at K's `rows`; 1: transposed, element by element (any
    `start`); 2: transposed, by `_v_slices` (`start` a multiple of min(BLOCK_N, BLOCK_SIZE),
    which holds when no window or local chunk moves a range's first key)."""
    if V_T == 2:
        if BLOCK_N >= BLOCK_SIZE:
            v = _v_slices(v_head, table_row, start, hi, offs_d, stride_vb, BLOCK_SIZE,
                          BLOCK_N // BLOCK_SIZE, BLOCK_SIZE, MASK_KEYS, TABLE_ASM)
        else:
            v = _v_slices(v_head, table_row, start, hi, offs_d, stride_vb, BLOCK_SIZE, 1,
                          BLOCK_N, MASK_KEYS, TABLE_ASM)
    else:
        offs_n = start + tl.arange(0, BLOCK_N)
        if V_T == 1:
            ptrs = v_head + _kv_rows(table_row, offs_n, stride_vb, 1, BLOCK_SIZE, MASK_KEYS, hi,
                                     TABLE_ASM) + (offs_d * BLOCK_SIZE)[None, :]
        else:
            ptrs = v_head + rows + offs_d[None, :]
        if MASK_KEYS:
            v = tl.load(ptrs, mask=(offs_n < hi)[:, None], other=0.0)
        else:
            v = tl.load(ptrs)
    return v


@triton.jit
def _scores(m_i, l_i, q, k, offs_n, hi, q_pos, row_lo, scale_log2, cap_in, cap_out,
            MASK_KEYS: tl.constexpr, MASK_ROWS: tl.constexpr, SOFT_CAP: tl.constexpr,
            DOT_PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    """Probabilities of one tile of keys `k` (cache dtype) and the running max, sum and the
    accumulator's rescaling. WIDEN (fp8 caches): 1 widens K and V by Triton's cast, 2 V by
    `widen_e4m3`'s PTX, 3 K and V."""
    if WIDEN >= 3:
        k = widen_e4m3(k, True)
    else:
        k = k.to(q.dtype)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # [BLOCK_M, BLOCK_N]
    if SOFT_CAP:  # else the scale is applied after the row maximum, in one FMA with exp2's
        s = softcap_log2(s, cap_in, cap_out)  # argument (max(s) * c = max(s * c) for c > 0)
    if MASK_ROWS:
        vis = (offs_n[None, :] <= q_pos[:, None]) & (offs_n[None, :] >= row_lo[:, None])
        if MASK_KEYS:
            vis = vis & (offs_n < hi)[None, :]
        s = tl.where(vis, s, float("-inf"))
    elif MASK_KEYS:
        s = tl.where((offs_n < hi)[None, :], s, float("-inf"))
    if SOFT_CAP:
        m_new = tl.maximum(m_i, tl.max(s, 1))
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale_log2)
    if MASK_ROWS:  # a row may have seen no key yet: keep exp2 away from -inf - -inf
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_ref = m_new
    alpha = tl.exp2(m_i - m_ref)
    if SOFT_CAP:
        p = tl.exp2(s - m_ref[:, None])
    else:
        p = tl.exp2(s * scale_log2 - m_ref[:, None])
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def _values(acc, p, alpha, v, q, UPCAST: tl.constexpr, SPLIT_P: tl.constexpr,
            DOT_PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    """The accumulator rescaled by `alpha` plus `p @ v` (v in the cache dtype)."""
    acc = acc * alpha[:, None]
    if WIDEN >= 2:
        v = widen_e4m3(v, True)
    else:
        v = v.to(q.dtype)
    return accumulate_pv(acc, p, v, UPCAST, SPLIT_P, DOT_PRECISION)


@triton.jit
def _tile(acc, m_i, l_i, q, start, hi, q_pos, row_lo, k_head, v_head, table_row, offs_d,
          scale_log2, cap_in, cap_out, stride_cb, stride_ct, stride_vb,
          BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, MASK_KEYS: tl.constexpr,
          MASK_ROWS: tl.constexpr, SOFT_CAP: tl.constexpr, UPCAST: tl.constexpr,
          SPLIT_P: tl.constexpr, DOT_PRECISION: tl.constexpr, WIDEN: tl.constexpr,
          TABLE_ASM: tl.constexpr, V_T: tl.constexpr):
    """One tile of keys [start, start + BLOCK_N), masked below `hi` if MASK_KEYS."""
    offs_n = start + tl.arange(0, BLOCK_N)
    rows = _kv_rows(table_row, offs_n, stride_cb, stride_ct, BLOCK_SIZE, MASK_KEYS, hi,
                    TABLE_ASM)
    n_mask = (offs_n < hi)[:, None]
    if MASK_KEYS:
        k = tl.load(k_head + rows + offs_d[None, :], mask=n_mask, other=0.0)
    else:
        k = tl.load(k_head + rows + offs_d[None, :])
    p, alpha, m_i, l_i = _scores(m_i, l_i, q, k, offs_n, hi, q_pos, row_lo, scale_log2,
                                 cap_in, cap_out, MASK_KEYS, MASK_ROWS, SOFT_CAP,
                                 DOT_PRECISION, WIDEN)
    v = _v_tile(v_head, rows, table_row, start, hi, offs_d, stride_vb, BLOCK_SIZE, BLOCK_N,
                MASK_KEYS, TABLE_ASM, V_T)
    return _values(acc, p, alpha, v, q, UPCAST, SPLIT_P, DOT_PRECISION, WIDEN), m_i, l_i


@triton.jit
def _attend_prefetch(acc, m_i, l_i, q, lo, hi, k_head, v_head, table_row, offs_d, scale_log2,
                     cap_in, cap_out, stride_cb, stride_ct, BLOCK_SIZE: tl.constexpr,
                     BLOCK_N: tl.constexpr, SOFT_CAP: tl.constexpr, UPCAST: tl.constexpr,
                     SPLIT_P: tl.constexpr, DOT_PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    """Whole tiles [lo, hi) that every row sees, software-pipelined by hand: the K/V loads of
    the next tile and the block-table load of the one after are issued before this tile's
    arithmetic, so their latency hides behind it (Triton's own pipelining keeps one buffer
    here and issues the next copy only after the current tile is read)."""
    if lo < hi:
        offs_t = tl.arange(0, BLOCK_N)
        last = hi - BLOCK_N
        rows = _kv_rows(table_row, lo + offs_t, stride_cb, stride_ct, BLOCK_SIZE, False, hi)
        k = tl.load(k_head + rows + offs_d[None, :])
        v = tl.load(v_head + rows + offs_d[None, :])
        rows = _kv_rows(table_row, tl.minimum(lo + BLOCK_N, last) + offs_t, stride_cb,
                        stride_ct, BLOCK_SIZE, False, hi)
        for start in range(lo, hi, BLOCK_N):
            more = (start + BLOCK_N + offs_t < hi)[:, None]
            k_next = tl.load(k_head + rows + offs_d[None, :], mask=more)
            v_next = tl.load(v_head + rows + offs_d[None, :], mask=more)
            rows = _kv_rows(table_row, tl.minimum(start + 2 * BLOCK_N, last) + offs_t,
                            stride_cb, stride_ct, BLOCK_SIZE, False, hi)
            p, alpha, m_i, l_i = _scores(m_i, l_i, q, k, start + offs_t, hi, offs_t, offs_t,
                                         scale_log2, cap_in, cap_out, False, False, SOFT_CAP,
                                         DOT_PRECISION, WIDEN)
            acc = _values(acc, p, alpha, v, q, UPCAST, SPLIT_P, DOT_PRECISION, WIDEN)
            k, v = k_next, v_next
    return acc, m_i, l_i


@triton.jit
def _attend_range(acc, m_i, l_i, q, lo, hi, q_pos, row_lo, k_head, v_head, table_row, offs_d,
                  scale_log2, cap_in, cap_out, stride_cb, stride_ct, stride_vb,
                  BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, MASK_KEYS: tl.constexpr,
                  MASK_ROWS: tl.constexpr, SOFT_CAP: tl.constexpr, UPCAST: tl.constexpr,
                  SPLIT_P: tl.constexpr, DOT_PRECISION: tl.constexpr, WIDEN: tl.constexpr,
                  V_T: tl.constexpr, TABLE_ASM: tl.constexpr = False):
    for start in range(lo, hi, BLOCK_N):
        acc, m_i, l_i = _tile(acc, m_i, l_i, q, start, hi, q_pos, row_lo, k_head, v_head,
                              table_row, offs_d, scale_log2, cap_in, cap_out, stride_cb,
                              stride_ct, stride_vb, BLOCK_SIZE, BLOCK_N, MASK_KEYS, MASK_ROWS,
                              SOFT_CAP, UPCAST, SPLIT_P, DOT_PRECISION, WIDEN, TABLE_ASM, V_T)
    return acc, m_i, l_i


@triton.jit
def attend(acc, m_i, l_i, q, lo, hi, full_lo, full_hi, q_pos, row_lo, k_head, v_head,
           table_row, offs_d, scale_log2, cap_in, cap_out, stride_cb, stride_ct, stride_vb,
           BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, MASK_ROWS: tl.constexpr,
           SOFT_CAP: tl.constexpr, UPCAST: tl.constexpr, SPLIT_P: tl.constexpr,
           DOT_PRECISION: tl.constexpr, WIDEN: tl.constexpr, PIPE: tl.constexpr,
           V_T: tl.constexpr):
    """Keys [lo, hi): whole tiles inside [full_lo, full_hi) (seen by every row) unmasked,
    loaded as PIPE says: 0 Triton's pipelining, 1 the same with the table read through PTX
    (`_kv_rows`), 2 by hand (`_attend_prefetch`).

    Without MASK_ROWS every row sees all of [lo, hi): only the last tile is masked. V_T: V's
    layout (`_v_tile`); the hand pipeline reads token-major V only.
    """
    if MASK_ROWS:
        a = tl.minimum(tl.maximum(full_lo, lo), hi)
        acc, m_i, l_i = _attend_range(acc, m_i, l_i, q, lo, a, q_pos, row_lo, k_head, v_head,
                                      table_row, offs_d, scale_log2, cap_in, cap_out, stride_cb,
                                      stride_ct, stride_vb, BLOCK_SIZE, BLOCK_N, True, True,
                                      SOFT_CAP, UPCAST, SPLIT_P, DOT_PRECISION, WIDEN, V_T)
        b = a + tl.maximum(tl.minimum(full_hi, hi) - a, 0) // BLOCK_N * BLOCK_N
    else:
        a = lo
        b = lo + (hi - lo) // BLOCK_N * BLOCK_N
    if PIPE == 2:
        tl.static_assert(V_T == 0, "the hand pipeline reads token-major V only")
        acc, m_i, l_i = _attend_prefetch(acc, m_i, l_i, q, a, b, k_head, v_head, table_row,
                                         offs_d, scale_log2, cap_in, cap_out, stride_cb,
                                         stride_ct, BLOCK_SIZE, BLOCK_N, SOFT_CAP, UPCAST,
                                         SPLIT_P, DOT_PRECISION, WIDEN)
    else:
        acc, m_i, l_i = _attend_range(acc, m_i, l_i, q, a, b, q_pos, row_lo, k_head, v_head,
                                      table_row, offs_d, scale_log2, cap_in, cap_out,
                                      stride_cb, stride_ct, stride_vb, BLOCK_SIZE, BLOCK_N,
                                      False, False, SOFT_CAP, UPCAST, SPLIT_P, DOT_PRECISION,
                                      WIDEN, V_T, PIPE == 1)
    acc, m_i, l_i = _attend_range(acc, m_i, l_i, q, b, hi, q_pos, row_lo, k_head, v_head,
                                  table_row, offs_d, scale_log2, cap_in, cap_out, stride_cb,
                                  stride_ct, stride_vb, BLOCK_SIZE, BLOCK_N, True, MASK_ROWS,
                                  SOFT_CAP, UPCAST, SPLIT_P, DOT_PRECISION, WIDEN, V_T)
    return acc, m_i, l_i


@triton.jit
def finish(acc, m_i, l_i, sink, v_scale, HAS_SINK: tl.constexpr):
    """Normalised rows times V's scale; a sink logit (log2 units) joins the denominator only."""
    if HAS_SINK:
        m_fin = tl.maximum(m_i, sink)
        m_fin = tl.where(m_fin == float("-inf"), 0.0, m_fin)
        keep = tl.exp2(m_i - m_fin)
        l_i = l_i * keep + tl.exp2(sink - m_fin)
        acc = acc * keep[:, None]
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    return acc * (v_scale / l_safe)[:, None]


@triton.jit
def log2_sum_exp(m_i, l_i):
    """A split's log2-sum-exp, -inf where it saw no key."""
    return tl.where(l_i > 0, m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))


def num_rows(tokens: int, group: int) -> tuple[int, int]:
    """(rows, padded rows) of a tile holding `tokens` query tokens of `group` query heads."""
    rows = tokens * group
    return rows, max(16, int(triton.next_power_of_2(rows)))
