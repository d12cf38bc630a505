"""Combine split-K (flash-decoding) partial results of paged decode attention.

Each split `s` of a (sequence, query head) left its normalised output `o_s` and the log2 of its
softmax denominator `lse_s` (log2 domain, scores already multiplied by log2(e)). The full
result is the softmax-weighted mean

    out = sum_s 2^(lse_s - M) * o_s / sum_s 2^(lse_s - M),   M = max_s lse_s

Empty splits carry lse = -inf and weigh nothing.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.launch import for_device, next_power_of_2, round_to_bf16, upcast_dot


@triton.jit
def _decode_reduce_kernel(
    out_ptr,  # [num_seqs, num_q_heads, HEAD_SIZE]
    part_ptr,  # [num_seqs, num_q_heads, num_splits, HEAD_SIZE] fp32
    lse_ptr,  # [num_seqs, num_q_heads, num_splits] fp32
    num_splits,
    stride_os,
    stride_oh,
    stride_ps,
    stride_ph,
    stride_pk,
    stride_ls,
    stride_lh,
    HEAD_SIZE: tl.constexpr,
    BLOCK_S: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_SIZE)
    s_mask = offs_s < num_splits
    lse = tl.load(
        lse_ptr + seq * stride_ls + head * stride_lh + offs_s, mask=s_mask, other=float("-inf")
    )
    lse_max = tl.max(lse, 0)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    weight = tl.where(lse > float("-inf"), tl.exp2(lse - lse_max), 0.0)  # [BLOCK_S]
    part_ptrs = (
        part_ptr
        + seq * stride_ps
        + head * stride_ph
        + offs_s[:, None] * stride_pk
        + offs_d[None, :]
    )
    part = tl.load(part_ptrs, mask=s_mask[:, None], other=0.0)  # [BLOCK_S, HEAD_SIZE]
    total = tl.sum(weight, 0)
    total = tl.where(total > 0, total, 1.0)
    out = tl.sum(part * weight[:, None], 0) / total
    if ROUND_BF16:
        out = round_to_bf16(out)
    tl.store(
        out_ptr + seq * stride_os + head * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty)
    )


def reduce_splits(out: torch.Tensor, partial: torch.Tensor, lse: torch.Tensor) -> None:
    """Write into `out` `[num_seqs, num_q_heads, head_size]` the combination of the splits.

    Args:
        out: destination, head dimension contiguous.
        partial: `[num_seqs, num_q_heads, num_splits, head_size]` fp32 normalised partial outputs.
        lse: `[num_seqs, num_q_heads, num_splits]` fp32 log2-sum-exp of each split.

    Raises:
        ValueError: on inconsistent shapes or non-contiguous inner dimensions.
    """
    num_seqs, num_heads, num_splits, head_size = partial.shape
    if tuple(out.shape) != (num_seqs, num_heads, head_size) or tuple(lse.shape) != (
        num_seqs,
        num_heads,
        num_splits,
    ):
        raise ValueError(
            f"reduce_splits: shapes out {tuple(out.shape)}, partial {tuple(partial.shape)}, "
            f"lse {tuple(lse.shape)} disagree"
        )
    if partial.stride(3) != 1 or lse.stride(2) != 1 or out.stride(2) != 1:
        raise ValueError("reduce_splits: innermost dimensions must be contiguous")
    if num_seqs == 0:
        return
    for_device(_decode_reduce_kernel, out.device)[(num_seqs, num_heads)](
        out,
        partial,
        lse,
        num_splits,
        out.stride(0),
        out.stride(1),
        partial.stride(0),
        partial.stride(1),
        partial.stride(2),
        lse.stride(0),
        lse.stride(1),
        HEAD_SIZE=head_size,
        BLOCK_S=next_power_of_2(num_splits),
        ROUND_BF16=upcast_dot(out),
        num_warps=4,
    )
