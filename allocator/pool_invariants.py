"""The block pool's invariants, checked on demand (the tests and property tests call it).

free + held == N - 1; block 0 is the null block and never free or cached; a non-null block is
in the free queue iff its ``ref_cnt`` is 0; the count of evictable cached blocks is current;
every cached key points only at blocks carrying it.
"""
from __future__ import annotations

from typing import Any


def check_pool(pool: Any) -> None:
    """Raise AssertionError naming the first inconsistency of `pool`, an
    `allocator.block_pool.BlockPool` (not imported: block_pool imports this module)."""
    free = pool.free_block_queue.get_all_free_blocks()
    _check(len(free) == pool.free_block_queue.num_free_blocks, "free count != queue length")
    _check(pool.null_block is pool.blocks[0] and pool.null_block.is_null, "block 0 not null")
    _check(pool.null_block.prev_free_block is None, "null block is in the free queue")
    free_ids = {block.block_id for block in free}
    _check(len(free_ids) == len(free), "a block appears twice in the free queue")
    held = 0
    for block in pool.blocks[1:]:
        _check(block.ref_cnt >= 0, f"block {block.block_id} has ref_cnt {block.ref_cnt}")
        in_queue = block.block_id in free_ids
        _check(
            in_queue == (block.ref_cnt == 0),
            f"block {block.block_id}: ref_cnt {block.ref_cnt} but in_queue={in_queue}",
        )
        held += block.ref_cnt > 0
    _check(len(free) + held == pool.num_gpu_blocks - 1, "free + held != N - 1")
    cached_free = sum(1 for block in free if block.block_hash is not None)
    _check(cached_free == pool.num_cached_free_blocks, "num_cached_free_blocks is stale")
    for key, blocks in pool.cached_block_hash_to_block.items():
        for block in blocks:
            _check(block.block_hash == key, f"block {block.block_id} cached under a wrong key")
            _check(not block.is_null, "the null block is in the prefix cache")


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)
