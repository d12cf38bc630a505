"""Move whole KV blocks between the device cache and a host (CPU) cache, in plain torch.

Swapping is a preemption policy: a swapped-out sequence's blocks go to a CPU cache of the same
per-block shape and come back later, possibly to other block ids. A swap is a gather on the
source device, one bulk transfer, and a scatter on the destination. The call returns once the
data has landed (synchronous copies), which is what a scheduler that frees the source needs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def allocate_cpu_cache(
    like: torch.Tensor, num_blocks: int, *, pin_memory: bool | None = None
) -> torch.Tensor:
    """Return an uninitialised CPU cache with `num_blocks` blocks shaped like `like`'s blocks.

    Pinned by default when CUDA is available, which makes host<->device transfers faster.
    """
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    return torch.empty((num_blocks, *like.shape[1:]), dtype=like.dtype, pin_memory=pin_memory)


def swap_blocks(
    src_cache: torch.Tensor,
    dst_cache: torch.Tensor,
    block_mapping: torch.Tensor | Sequence[tuple[int, int]],
) -> None:
    """Copy `src_cache[src]` to `dst_cache[dst]` for each `(src, dst)` pair, across devices.

    Args:
        src_cache, dst_cache: `[num_blocks, block_size, num_kv_heads, head_size]` caches with
            equal block shapes and dtypes, on any two devices.
        block_mapping: `(src, dst)` pairs, a list or an int `[num_pairs, 2]` tensor.

    Raises:
        ValueError: on block shape/dtype mismatches or ids outside either cache.
    """
    if src_cache.shape[1:] != dst_cache.shape[1:] or src_cache.dtype != dst_cache.dtype:
        raise ValueError(
            f"swap: block shapes/dtypes differ: {tuple(src_cache.shape)} {src_cache.dtype} vs "
            f"{tuple(dst_cache.shape)} {dst_cache.dtype}"
        )
    pairs = torch.as_tensor(block_mapping, dtype=torch.int64).reshape(-1, 2).cpu()
    if pairs.numel() == 0:
        return
    src_ids, dst_ids = pairs[:, 0], pairs[:, 1]
    if src_ids.min() < 0 or src_ids.max() >= src_cache.shape[0]:
        raise ValueError(f"swap: source block id outside [0, {src_cache.shape[0]})")
    if dst_ids.min() < 0 or dst_ids.max() >= dst_cache.shape[0]:
        raise ValueError(f"swap: destination block id outside [0, {dst_cache.shape[0]})")
    if src_cache.element_size() == 1:  # fp8: torch's CPU index ops want plain bytes
        src_cache, dst_cache = src_cache.view(torch.uint8), dst_cache.view(torch.uint8)
    gathered = src_cache.index_select(0, src_ids.to(src_cache.device))
    dst_cache.index_copy_(0, dst_ids.to(dst_cache.device), gathered.to(dst_cache.device))


def swap_kv(
    src: tuple[torch.Tensor, torch.Tensor],
    dst: tuple[torch.Tensor, torch.Tensor],
    block_mapping: torch.Tensor | Sequence[tuple[int, int]],
) -> None:
    """Swap the same blocks of a (K, V) cache pair: `swap_blocks` on K, then on V."""
    swap_blocks(src[0], dst[0], block_mapping)
    swap_blocks(src[1], dst[1], block_mapping)
