"""The memory-waste snapshot of the paged manager, in O(running requests) per call.

Every held block is either full of computed tokens or a *tail* block of some request: a block
at or past index ``num_computed_tokens // block_size`` of that request's table. So only tail
blocks need looking at::

    request table   [ b7 ][ b3 ][ b9 ][ b4 ]          block_size 4, 10 tokens computed,
    slots           TTTT  TTTT  TTrr  rrii          final length 14
                    full  full  tail  tail          T token state, r reserved, i internal

A tail block shared by forked sequences (ref_cnt > 1) holds the same written slots for every
holder, so it is counted once; its unwritten slots are reserved if any holder's final length
reaches them (that holder will write them, in place or after a copy-on-write), else internal.
Categories are defined in ``allocator/waste.py``; paged managers have no external
fragmentation.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from allocator.interface import MemorySnapshot
from allocator.sliding_window_manager import SlidingWindowManager
from allocator.waste import final_kv_slots

if TYPE_CHECKING:
    from allocator.block_pool import BlockPool
    from allocator.kv_cache_manager import KVCacheManager
    from allocator.request import Request


def count_cached_free_blocks(pool: BlockPool) -> int:
    """Free blocks that still carry a prefix-cache hash (a full scan; the reference count)."""
    return sum(1 for b in pool.blocks[1:] if b.ref_cnt == 0 and b.block_hash is not None)


def paged_memory_snapshot(
    manager: KVCacheManager, requests: Mapping[str, Request]
) -> MemorySnapshot:
    """Classify every usable slot of the manager's pool (see the module docstring); ``requests``
    maps each live request id to its request."""
    pool = manager.block_pool
    block_size = manager.block_size
    num_usable = pool.num_gpu_blocks - 1
    num_free = pool.get_num_free_blocks()
    num_cached = getattr(pool, "num_cached_free_blocks", None)
    if num_cached is None:
        num_cached = count_cached_free_blocks(pool)
    sliding = isinstance(manager.single_type_manager, SlidingWindowManager)
    tails: dict[int, list[int]] = {}
    logical = 0
    for request_id, blocks in manager.single_type_manager.req_to_blocks.items():
        if not blocks:
            continue
        request = requests[request_id]
        computed = request.num_computed_tokens
        num_null = sum(1 for b in blocks if b.is_null) if sliding else 0
        logical += max(0, min(computed, len(blocks) * block_size) - num_null * block_size)
        final = final_kv_slots(request, manager.max_model_len)
        for index in range(computed // block_size, len(blocks)):
            block = blocks[index]
            if block.is_null:
                continue
            start = index * block_size
            written = max(0, computed - start)
            will_write = min(block_size, max(0, final - start))
            reserved = max(0, will_write - written)
            seen = tails.get(block.block_id)
            if seen is None:
                tails[block.block_id] = [block_size - written, reserved]
            elif reserved > seen[1]:
                seen[1] = reserved
    unwritten = sum(t[0] for t in tails.values())
    reserved_slots = sum(t[1] for t in tails.values())
    held_slots = (num_usable - num_free) * block_size
    return MemorySnapshot(
        capacity=num_usable * block_size,
        token_states=held_slots - unwritten,
        reserved=reserved_slots,
        internal_frag=unwritten - reserved_slots,
        cached_evictable=num_cached * block_size,
        external_frag=0,
        free=(num_free - num_cached) * block_size,
        logical_slots=logical,
        null_slots=block_size,
    )
