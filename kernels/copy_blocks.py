"""Execute an allocator copy plan on the paged cache (copy-on-write after prefix sharing).

The allocator returns the plan as data, `[(src_block_id, dst_block_id), ...]` (vLLM v0's
CopyOnWriteTracker); this kernel copies whole physical blocks of K and V. Copies in one plan
run concurrently, so no destination may also be a source (fresh CoW targets never are).
A block is one contiguous run of `block_size * num_kv_heads * head_size` elements; each
program moves one `BLOCK_E` chunk of it in K and the same chunk in V.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from kernels.cache_layout import is_transposed_v
from kernels.launch import check_kv_cache, for_device, next_power_of_2

CHUNK_ELEMENTS = 8192


@triton.jit
def _copy_blocks_kernel(
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_size]
    v_cache_ptr,
    pairs_ptr,  # [num_pairs, 2] (src, dst)
    stride_kb,
    stride_vb,
    BLOCK_NUMEL: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    pair = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    mask = offs < BLOCK_NUMEL
    src = tl.load(pairs_ptr + 2 * pair).to(tl.int64)
    dst = tl.load(pairs_ptr + 2 * pair + 1).to(tl.int64)
    k = tl.load(k_cache_ptr + src * stride_kb + offs, mask=mask)
    tl.store(k_cache_ptr + dst * stride_kb + offs, k, mask=mask)
    v = tl.load(v_cache_ptr + src * stride_vb + offs, mask=mask)
    tl.store(v_cache_ptr + dst * stride_vb + offs, v, mask=mask)


def copy_plan_tensor(
    plan: torch.Tensor | Sequence[tuple[int, int]], num_blocks: int, device: torch.device
) -> torch.Tensor:
    """Return the plan as a contiguous int64 `[num_pairs, 2]` tensor, validating list input.

    Raises:
        ValueError: a block id outside the cache, or a destination that is also a source.
    """
    if isinstance(plan, torch.Tensor):
        if plan.dim() != 2 or plan.shape[1] != 2 or plan.dtype not in (torch.int32, torch.int64):
            raise ValueError(
                f"copy plan: expected an int [num_pairs, 2] tensor, "
                f"got {plan.dtype} {tuple(plan.shape)}"
            )
        return plan.to(device=device, dtype=torch.int64).contiguous()
    pairs = [(int(s), int(d)) for s, d in plan]
    ids = [b for pair in pairs for b in pair]
    if any(b < 0 or b >= num_blocks for b in ids):
        raise ValueError(f"copy plan: block id outside [0, {num_blocks})")
    sources = {s for s, _ in pairs}
    if any(d in sources for _, d in pairs):
        raise ValueError("copy plan: a destination block is also a source; split the plan")
    return torch.tensor(pairs, dtype=torch.int64, device=device).reshape(-1, 2)


def copy_blocks(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: torch.Tensor | Sequence[tuple[int, int]],
    *,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> None:
    """Copy block `src` to block `dst` in both caches for every pair of `plan`, in place.

    Args:
        k_cache, v_cache: `[num_blocks, block_size, num_kv_heads, head_size]`, each block
            contiguous (V token-major or transposed per block: kernels/cache_layout.py).
        plan: `(src, dst)` pairs as a list or an int `[num_pairs, 2]` tensor.
        chunk_elements: elements per program (a tuning knob).

    Raises:
        ValueError: on bad shapes/strides or an invalid list plan.
    """
    num_blocks, block_size, num_kv_heads, head_size = check_kv_cache(k_cache, v_cache)
    for cache in (k_cache, v_cache):
        token_major = cache.stride(2) == head_size and cache.stride(1) == num_kv_heads * head_size
        if not (token_major or is_transposed_v(cache)):
            raise ValueError("caches: each block must be one contiguous run")
    pairs = copy_plan_tensor(plan, num_blocks, k_cache.device)
    if pairs.shape[0] == 0:
        return
    block_numel = block_size * num_kv_heads * head_size
    block_e = min(next_power_of_2(block_numel), chunk_elements)
    grid = (pairs.shape[0], triton.cdiv(block_numel, block_e))
    for_device(_copy_blocks_kernel, k_cache.device)[grid](
        k_cache,
        v_cache,
        pairs,
        k_cache.stride(0),
        v_cache.stride(0),
        BLOCK_NUMEL=block_numel,
        BLOCK_E=block_e,
        num_warps=4,
    )
