"""An experiment for the fp8 decode target: the dots with the keys as the tall operand.

The shipped decode kernel multiplies `q [16 rows, d] x K^T [d, 64 keys]`: a GQA group (4 query
heads for Llama-3-8B) padded to 16 rows, so on Hopper Triton issues warp-level `mma` with fp8
keys widened to fp16 and moved into the operand layout first; with 2 warps per program it is
latency-bound (benchmarks/RESULTS.md, r9 ncu: 0.36 issued warps per scheduler at 3.4 TB/s).
Here the same attention is computed transposed, `S^T = K [64 keys, d] x q^T [d, 16]` and
`O^T = V^T [d, 64] x P^T [64, 16]`, so both dots have 64 or more rows and, with one warp group
(4 warps), may run as Hopper's warp-group MMA with the widened tile as the register operand.
Decode only, one program per (sequence, KV head), context lengths a multiple of BLOCK_N, no
split-K: enough to compare with the shipped kernel on batches it does not split (64 x 4096,
128 x 2048, 256 x 1024). Not used by the kernels package.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.attention_core import load_query, read_table
from kernels.fp8 import widen_e4m3
from kernels.launch import for_device

BLOCK_N = 64


@triton.jit
def swapped_decode_kernel(out, q, k_cache, v_cache, tables, lens, scale_log2, v_scale,
                          stride_qt, stride_ot, stride_cb, stride_ct, stride_tb,
                          QPK: tl.constexpr, RP: tl.constexpr, HEAD: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr, ASM: tl.constexpr):
    seq, kvh = tl.program_id(0), tl.program_id(1)
    n = tl.load(lens + seq)
    offs_r, offs_d = tl.arange(0, RP), tl.arange(0, HEAD)
    rmask = offs_r < QPK
    heads = kvh * QPK + offs_r
    qv = tl.load(q + seq * stride_qt + heads[:, None] * HEAD + offs_d[None, :],
                 mask=rmask[:, None], other=0.0)
    q16, gain = load_query(qv, False, True)
    q_t = tl.trans(q16)  # [HEAD, RP]
    scale = scale_log2 * gain
    m_i = tl.full([RP], float("-inf"), tl.float32)
    l_i = tl.zeros([RP], tl.float32)
    acc_t = tl.zeros([HEAD, RP], tl.float32)
    k_head, v_head = k_cache + kvh * HEAD, v_cache + kvh * HEAD
    table_row = tables + seq * stride_tb
    for start in range(0, n, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        if ASM:
            block_id = read_table(table_row + tl.minimum(offs_n, n - 1) // BLOCK_SIZE)
        else:
            block_id = tl.load(table_row + offs_n // BLOCK_SIZE)
        rows = (block_id.to(tl.int64) * stride_cb + (offs_n % BLOCK_SIZE) * stride_ct)[:, None]
        k = widen_e4m3(tl.load(k_head + rows + offs_d[None, :]), ASM)  # [BLOCK_N, HEAD]
        s_t = tl.dot(k, q_t)  # [BLOCK_N, RP]
        m_new = tl.maximum(m_i, tl.max(s_t, 0) * scale)
        alpha = tl.exp2(m_i - m_new)
        p_t = tl.exp2(s_t * scale - m_new[None, :])
        l_i = l_i * alpha + tl.sum(p_t, 0)
        v = widen_e4m3(tl.load(v_head + rows + offs_d[None, :]), ASM)
        acc_t = acc_t * alpha[None, :] + tl.dot(tl.trans(v), p_t.to(tl.float16))
        m_i = m_new
    o_t = acc_t * (v_scale / l_i)[None, :]
    tl.store(out + seq * stride_ot + heads[None, :] * HEAD + offs_d[:, None],
             o_t.to(out.dtype.element_ty), mask=rmask[None, :])


def swapped_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   tables: torch.Tensor, lens: torch.Tensor, k_scale: float, v_scale: float,
                   out: torch.Tensor, num_warps: int = 4, num_stages: int = 3) -> torch.Tensor:
    """Decode over an fp8 cache (`[blocks, block_size, kv_heads, head]`), every context a
    multiple of BLOCK_N tokens (not checked on the device: the caller's contract)."""
    num_seqs, num_q, head = q.shape
    kv_heads = k_cache.shape[2]
    group = num_q // kv_heads
    cpu = q.device.type == "cpu"
    for_device(swapped_decode_kernel, q.device)[(num_seqs, kv_heads)](
        out, q, k_cache, v_cache, tables, lens, head**-0.5 * k_scale * 1.4426950408889634,
        v_scale, q.stride(0), out.stride(0), k_cache.stride(0), k_cache.stride(1),
        tables.stride(0), QPK=group, RP=max(16, triton.next_power_of_2(group)), HEAD=head,
        BLOCK_N=BLOCK_N, BLOCK_SIZE=k_cache.shape[1], ASM=not cpu, num_warps=num_warps,
        num_stages=num_stages)
    return out


SHAPES = ((64, 4096), (128, 2048), (256, 1024))
VARIANTS = {"swap_w4s3": (4, 3), "swap_w4s2": (4, 2), "swap_w8s3": (8, 3)}


def calls() -> dict[str, object]:
    """VARIANTS behind paged_decode_attention's calling convention (kernel_ab.experiment_ab)."""
    return {name: _as_decode(warps, stages) for name, (warps, stages) in VARIANTS.items()}


def _as_decode(warps: int, stages: int):
    """The swapped kernel behind paged_decode_attention's calling convention."""
    def call(q, k, v, tables, lens, *, out, k_scale=1.0, v_scale=1.0, **_):
        return swapped_decode(q, k, v, tables, lens, k_scale, v_scale, out, warps, stages)
    return call
