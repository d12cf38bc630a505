"""An experiment for the fp8 decode target: V stored transposed within each block.

In the token-major cache (`[blocks, block_size, kv_heads, head]`) a V tile arrives with the
head dimension contiguous, but `P @ V` contracts over tokens. For bf16 the dot reads such a
tile from shared memory transposed (ldmatrix); fp8 has no such path on Hopper, so the shipped
kernel widens V to fp16 in registers (PTX) and Triton then moves the widened tile into the
dot's operand layout through shared memory a second time. K, contracted over the head
dimension it has contiguous, needs none of that (Triton's cast, measured faster than PTX for
K in r4). Stored as `[blocks, kv_heads, head, block_size]` (the layout of V in vLLM's first
paged-attention kernel), V has tokens contiguous and enters `P @ V` exactly as K enters
`q @ K^T`. This kernel times both layouts with everything else equal: one program per
(sequence, KV head), 64-token tiles, the block table read through PTX, 3 stages, no split-K,
contexts a multiple of BLOCK_N (the batches the shipped kernel does not split: 64 x 4096,
128 x 2048, 256 x 1024). Not used by the kernels package.

Measured on an H100 (benchmarks/RESULTS.md, 2026-12-07): the transposed layout gains nothing
(-2 % to +2 % against the token-major control), so the V layout is not what holds the fp8
kernel back. Read through the block table element by element, the transposed tile is 2x
slower: the compiler cannot see that a block's tokens are contiguous when the block id comes
from the table, so it loads bytes one at a time; mode 3 loads each block's slice as its own
axis and is as fast as the control.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.attention_core import load_query, read_table
from kernels.fp8 import widen_e4m3
from kernels.launch import for_device

BLOCK_N = 64
# V_MODE: 0 token-major V widened by PTX (the shipped kernel's way), 1 transposed V by
# Triton's cast, 2 transposed V by PTX, 3 transposed V loaded per block as [blocks, head,
# block_size] (so the compiler sees each block's tokens contiguous) and cast
MODES = {"tokmajor": 0, "vt_cast": 1, "vt_asm": 2, "vt3_cast": 3}


@triton.jit
def vt_decode_kernel(out, q, k_cache, v_cache, tables, lens, scale_log2, v_scale,
                     stride_qt, stride_ot, stride_kb, stride_kt, stride_vb, stride_vh,
                     stride_vd, stride_vt, stride_tb, QPK: tl.constexpr, RP: tl.constexpr,
                     HEAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                     V_MODE: tl.constexpr, ASM: tl.constexpr):
    seq, kvh = tl.program_id(0), tl.program_id(1)
    n = tl.load(lens + seq)
    offs_r, offs_d = tl.arange(0, RP), tl.arange(0, HEAD)
    rmask = offs_r < QPK
    heads = kvh * QPK + offs_r
    qv = tl.load(q + seq * stride_qt + heads[:, None] * HEAD + offs_d[None, :],
                 mask=rmask[:, None], other=0.0)
    q16, gain = load_query(qv, False, True)
    scale = scale_log2 * gain
    m_i = tl.full([RP], float("-inf"), tl.float32)
    l_i = tl.zeros([RP], tl.float32)
    acc = tl.zeros([RP, HEAD], tl.float32)
    k_head = k_cache + kvh * HEAD
    v_head = v_cache + kvh * stride_vh
    table_row = tables + seq * stride_tb
    for start in range(0, n, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        if ASM:
            block_id = read_table(table_row + tl.minimum(offs_n, n - 1) // BLOCK_SIZE)
        else:
            block_id = tl.load(table_row + offs_n // BLOCK_SIZE)
        blk = block_id.to(tl.int64)
        slot = offs_n % BLOCK_SIZE
        k = tl.load(k_head + (blk * stride_kb + slot * stride_kt)[:, None] + offs_d[None, :])
        s = tl.dot(q16, tl.trans(k.to(tl.float16)))  # [RP, BLOCK_N]
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s * scale - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if V_MODE == 0:
            v = tl.load(v_head + (blk * stride_vb + slot * stride_vt)[:, None]
                        + offs_d[None, :] * stride_vd)  # [BLOCK_N, HEAD]
            v16 = widen_e4m3(v, ASM)
        elif V_MODE == 3:
            # the table entry of each block of the tile, and its [head, block_size] slice
            offs_b = start // BLOCK_SIZE + tl.arange(0, BLOCK_N // BLOCK_SIZE)
            if ASM:
                blk3 = read_table(table_row + tl.minimum(offs_b, (n - 1) // BLOCK_SIZE)
                                  ).to(tl.int64)
            else:
                blk3 = tl.load(table_row + offs_b).to(tl.int64)
            offs_s = tl.arange(0, BLOCK_SIZE)
            vt3 = tl.load(v_head + blk3[:, None, None] * stride_vb
                          + offs_d[None, :, None] * stride_vd + offs_s[None, None, :])
            v16 = tl.reshape(tl.permute(vt3, (0, 2, 1)), (BLOCK_N, HEAD)).to(tl.float16)
        else:
            vt = tl.load(v_head + (blk * stride_vb + slot * stride_vt)[None, :]
                         + offs_d[:, None] * stride_vd)  # [HEAD, BLOCK_N], tokens contiguous
            if V_MODE == 1:
                v16 = tl.trans(vt.to(tl.float16))
            else:
                v16 = tl.trans(widen_e4m3(vt, ASM))
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v16)
        m_i = m_new
    o = acc * (v_scale / l_i)[:, None]
    tl.store(out + seq * stride_ot + heads[:, None] * HEAD + offs_d[None, :],
             o.to(out.dtype.element_ty), mask=rmask[:, None])


def transposed(v_cache: torch.Tensor) -> torch.Tensor:
    """A token-major V cache `[blocks, block_size, kv_heads, head]` stored as `[blocks,
    kv_heads, head, block_size]`."""
    return v_cache.permute(0, 2, 3, 1).contiguous()


def vt_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              tables: torch.Tensor, lens: torch.Tensor, k_scale: float, v_scale: float,
              out: torch.Tensor, mode: str = "vt_cast", num_warps: int = 2,
              num_stages: int = 3) -> torch.Tensor:
    """Decode over an fp8 cache: K token-major; V token-major for mode `tokmajor`, else as
    `transposed` gives it. Every context a multiple of BLOCK_N (the caller's contract)."""
    num_seqs, num_q, head = q.shape
    kv_heads, block = k_cache.shape[2], k_cache.shape[1]
    if mode == "tokmajor":
        sv = (v_cache.stride(0), v_cache.stride(2), 1, v_cache.stride(1))
    else:
        sv = (v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), 1)
    group = num_q // kv_heads
    for_device(vt_decode_kernel, q.device)[(num_seqs, kv_heads)](
        out, q, k_cache, v_cache, tables, lens, head**-0.5 * k_scale * 1.4426950408889634,
        v_scale, q.stride(0), out.stride(0), k_cache.stride(0), k_cache.stride(1), *sv,
        tables.stride(0), QPK=group, RP=max(16, triton.next_power_of_2(group)), HEAD=head,
        BLOCK_N=BLOCK_N, BLOCK_SIZE=block, V_MODE=MODES[mode], ASM=q.device.type != "cpu",
        num_warps=num_warps, num_stages=num_stages)
    return out


SHAPES = ((64, 4096), (128, 2048), (256, 1024))
VARIANTS = {"tokmajor_w2s3": ("tokmajor", 2, 3), "vt_cast_w2s3": ("vt_cast", 2, 3),
            "vt_asm_w2s3": ("vt_asm", 2, 3), "vt3_cast_w2s3": ("vt3_cast", 2, 3),
            "vt3_cast_w1s3": ("vt3_cast", 1, 3), "vt3_cast_w4s3": ("vt3_cast", 4, 3)}


def calls(t8) -> dict[str, object]:
    """VARIANTS over t8's caches behind paged_decode_attention's calling convention
    (kernel_ab.experiment_ab); the transposed modes read one transposed copy of t8's V."""
    v_t = transposed(t8.v)
    return {name: _as_decode(t8.v if mode == "tokmajor" else v_t, mode, warps, stages)
            for name, (mode, warps, stages) in VARIANTS.items()}


def _as_decode(v_cache: torch.Tensor, mode: str, warps: int, stages: int):
    """The kernel behind paged_decode_attention's calling convention, reading `v_cache` in
    place of the V it is given."""
    def call(q, k, v, tables, lens, *, out, k_scale=1.0, v_scale=1.0, **_):
        return vt_decode(q, k, v_cache, tables, lens, k_scale, v_scale, out, mode, warps,
                         stages)
    return call
