"""Unit tests for allocator/single_type_manager.py: full-attention and sliding-window managers."""

from __future__ import annotations

import pytest

from allocator.block import KVCacheBlock
from allocator.block_pool import BlockPool
from allocator.hashing import make_block_hash_with_group_id
from allocator.kv_cache_spec import FullAttentionSpec, SlidingWindowSpec
from allocator.single_type_manager import FullAttentionManager, cdiv
from allocator.sliding_window_manager import SlidingWindowManager, get_manager_for_kv_cache_spec


def full_manager(bs: int = 2, num_blocks: int = 100) -> FullAttentionManager:
    pool = BlockPool(num_blocks, True, bs)
    manager = get_manager_for_kv_cache_spec(FullAttentionSpec(bs), pool, True, 0)
    assert isinstance(manager, FullAttentionManager)
    return manager


def sw_manager(bs: int = 2, window: int = 4, num_blocks: int = 100) -> SlidingWindowManager:
    pool = BlockPool(num_blocks, True, bs)
    manager = get_manager_for_kv_cache_spec(SlidingWindowSpec(bs, window), pool, True, 0)
    assert isinstance(manager, SlidingWindowManager)
    return manager


def test_cdiv() -> None:
    """cdiv rounds up."""
    assert (cdiv(0, 4), cdiv(1, 4), cdiv(4, 4), cdiv(5, 4)) == (0, 1, 1, 2)


@pytest.mark.parametrize("make", [full_manager, sw_manager])
def test_num_blocks_to_allocate_counts_evictable_hits(make) -> None:
    """Spec 5.1: 40 tokens, bs 2, 10 ref-0 hits -> 20; 5 nulls + 5 ref-0 hits -> 15."""
    manager = make()
    fresh = [KVCacheBlock(i + 1) for i in range(10)]
    assert manager.get_num_blocks_to_allocate("1", 20 * 2, fresh, 0) == 20
    nulls = [manager.block_pool.null_block] * 5 + [KVCacheBlock(i + 1) for i in range(5)]
    assert manager.get_num_blocks_to_allocate("2", 20 * 2, nulls, 0) == 15


def test_num_blocks_to_allocate_ignores_held_hits_and_running() -> None:
    """Held hits cost nothing; a running request needs only its missing blocks."""
    manager = full_manager()
    held = manager.block_pool.get_new_blocks(3)
    assert manager.get_num_blocks_to_allocate("1", 10, held, 0) == 2
    manager.allocate_new_blocks("r", 4)
    manager.num_cached_block["r"] = 0
    assert manager.get_num_blocks_to_allocate("r", 9, [], 0) == 3
    assert manager.get_num_blocks_to_allocate("r", 3, [], 0) == 0
    with pytest.raises(ValueError, match="running"):
        manager.get_num_blocks_to_allocate("r", 9, held, 0)


def test_allocate_new_blocks_and_free_reverse() -> None:
    """New blocks come from the queue front; free releases them last block first."""
    manager = full_manager(bs=2, num_blocks=6)
    assert [b.block_id for b in manager.allocate_new_blocks("r", 5)] == [1, 2, 3]
    assert manager.allocate_new_blocks("r", 6) == []
    manager.free("r")
    queue = manager.block_pool.free_block_queue.get_all_free_blocks()
    assert [b.block_id for b in queue] == [4, 5, 3, 2, 1]
    manager.free("r")
    assert "r" not in manager.req_to_blocks


def test_find_longest_cache_hit_full_attention() -> None:
    """Hits run left to right, stop at the first miss and respect max_length and EAGLE."""
    manager = full_manager(bs=2)
    pool = manager.block_pool
    hashes = [bytes([i]) * 4 for i in range(5)]
    for i in (0, 1, 2, 4):
        pool.cached_block_hash_to_block.insert(
            make_block_hash_with_group_id(hashes[i], 0), pool.blocks[10 + i]
        )
    hit = FullAttentionManager.find_longest_cache_hit(hashes, 10, [0], pool, manager.kv_cache_spec)
    assert [b.block_id for b in hit[0]] == [10, 11, 12]
    hit = FullAttentionManager.find_longest_cache_hit(hashes, 5, [0], pool, manager.kv_cache_spec)
    assert [b.block_id for b in hit[0]] == [10, 11]
    hit = FullAttentionManager.find_longest_cache_hit(
        hashes, 10, [0], pool, manager.kv_cache_spec, use_eagle=True
    )
    assert [b.block_id for b in hit[0]] == [10, 11]
    hit = FullAttentionManager.find_longest_cache_hit(
        hashes, 10, [0], pool, manager.kv_cache_spec, alignment_tokens=4
    )
    assert [b.block_id for b in hit[0]] == [10, 11]


@pytest.mark.parametrize(
    ("cached", "expect_length"),
    [
        ([False] * 10, 0),
        ([True], 1),
        ([True, False], 1),
        ([True, True], 2),
        ([True, True, False], 2),
        ([True, True, True], 3),
        ([True, True, True, False], 3),
        ([True, True, False, True, False, False, True, True, False, True, True, True], 12),
        ([True, True, False, True, False, False, True, True, False, False, False], 8),
        ([True, True, False, True, False, False, True, True, False, False, False, True], 8),
    ],
)
def test_sliding_window_cache_hit(cached: list[bool], expect_length: int) -> None:
    """Window 4, bs 2: the hit ends at the last 2 contiguous cached blocks; earlier ones are null."""
    manager = sw_manager(bs=2, window=4)
    pool = manager.block_pool
    hashes = [str(i).encode() for i in range(len(cached))]
    for i, is_cached in enumerate(cached):
        if is_cached:
            pool.cached_block_hash_to_block.insert(
                make_block_hash_with_group_id(hashes[i], 0), pool.blocks[i + 10]
            )
    hit = SlidingWindowManager.find_longest_cache_hit(
        hashes, len(hashes) * 2, [0], pool, manager.kv_cache_spec
    )[0]
    assert len(hit) == expect_length
    assert all(block is pool.null_block for block in hit[: expect_length - 2])
    for block_index in range(max(0, expect_length - 2), expect_length):
        assert hit[block_index].block_id == block_index + 10


def test_sliding_window_skipped_tokens_and_removal() -> None:
    """Blocks wholly before the window become null, are freed highest index first, once."""
    manager = sw_manager(bs=2, window=4, num_blocks=10)
    blocks = manager.allocate_new_blocks("r", 12)
    assert [b.block_id for b in blocks] == [1, 2, 3, 4, 5, 6]
    assert manager.get_num_skipped_tokens(3) == 0 and manager.get_num_skipped_tokens(10) == 7
    manager.remove_skipped_blocks("r", 10)
    table = manager.req_to_blocks["r"]
    assert [b.block_id for b in table] == [0, 0, 0, 4, 5, 6]
    queue = [b.block_id for b in manager.block_pool.free_block_queue.get_all_free_blocks()]
    assert queue == [7, 8, 9, 3, 2, 1]
    manager.remove_skipped_blocks("r", 12)
    assert [b.block_id for b in table] == [0, 0, 0, 0, 5, 6]
    manager.free("r")
    manager.check_invariants()


def test_allocate_new_computed_blocks_pads_skipped_hits_with_null() -> None:
    """Hits inside the skipped prefix become null blocks and are not touched."""
    manager = sw_manager(bs=2, window=4, num_blocks=10)
    hits = manager.block_pool.get_new_blocks(4)
    manager.block_pool.free_blocks(hits)
    manager.allocate_new_computed_blocks("r", hits, 8, 0)
    table = manager.req_to_blocks["r"]
    assert [b.block_id for b in table] == [0, 0, 3, 4]
    assert hits[0].ref_cnt == 0 and hits[2].ref_cnt == 1
    assert manager.num_cached_block["r"] == 4
    manager.check_invariants()


def test_allocate_new_computed_blocks_external_tokens() -> None:
    """External tokens get fresh blocks after the touched hits."""
    manager = full_manager(bs=2, num_blocks=10)
    hits = manager.block_pool.get_new_blocks(2)
    manager.allocate_new_computed_blocks("r", hits, 4, 3)
    assert [b.block_id for b in manager.req_to_blocks["r"]] == [1, 2, 3, 4]
    assert hits[0].ref_cnt == 2
    with pytest.raises(ValueError, match="running"):
        manager.allocate_new_computed_blocks("r", hits, 4, 0)


def test_common_prefix_blocks() -> None:
    """Full attention counts leading blocks held by every request; sliding window says 0."""
    manager = full_manager(bs=2, num_blocks=10)
    shared = manager.allocate_new_blocks("a", 4)
    manager.block_pool.touch(shared)
    manager.req_to_blocks["b"].extend(shared)
    manager.allocate_new_blocks("b", 6)
    assert manager.get_num_common_prefix_blocks("b") == 2
    assert manager.get_num_common_prefix_blocks("unknown") == 0
    manager.check_invariants()
    assert sw_manager().get_num_common_prefix_blocks("x") == 0


def test_check_invariants_detects_ref_mismatch() -> None:
    """A ref count that disagrees with the holders in req_to_blocks is reported."""
    manager = full_manager(bs=2, num_blocks=6)
    blocks = manager.allocate_new_blocks("r", 4)
    blocks[0].ref_cnt = 2
    with pytest.raises(AssertionError, match="holders"):
        manager.check_invariants()


def test_sliding_window_manager_needs_sliding_spec() -> None:
    """Building a sliding-window manager from a full-attention spec raises TypeError."""
    with pytest.raises(TypeError):
        SlidingWindowManager(FullAttentionSpec(2), BlockPool(4, True, 2), True, 0)
