"""Unit tests for allocator/block_pool.py: allocation order, caching, lazy eviction, reset."""

from __future__ import annotations

import pytest

from allocator.block import KVCacheBlock
from allocator.block_pool import BlockHashToBlockMap, BlockPool
from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.request import Request

BS = 4


@pytest.fixture(autouse=True)
def _seed() -> None:
    init_none_hash(sha256)


def queue_ids(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def hashed_request(tokens: list[int], request_id: str = "r") -> Request:
    return Request(request_id, tokens, 4, block_hasher=get_request_block_hasher(BS, sha256))


def key(request: Request, i: int) -> bytes:
    return request.block_hashes[i] + (0).to_bytes(4, "big")


@pytest.mark.parametrize(
    ("num_blocks", "hash_bs", "match"), [(0, 4, "num_gpu_blocks"), (4, 0, "hash_block_size")]
)
def test_constructor_rejects_bad_sizes(num_blocks: int, hash_bs: int, match: str) -> None:
    """Fewer than 1 block or a block size below 1 raises ValueError naming the value."""
    with pytest.raises(ValueError, match=match):
        BlockPool(num_blocks, True, hash_bs)


def test_null_block_reserved() -> None:
    """Block 0 is the null block; N blocks leave N - 1 free and the first allocation is id 1."""
    pool = BlockPool(5, True, BS)
    assert pool.null_block.block_id == 0 and pool.null_block.is_null
    assert pool.get_num_free_blocks() == 4 and queue_ids(pool) == [1, 2, 3, 4]
    assert [b.block_id for b in pool.get_new_blocks(1)] == [1]
    assert pool.get_usage() == pytest.approx(0.25)
    assert BlockPool(1, True, BS).get_usage() == 0.0


def test_get_new_blocks_front_and_overask() -> None:
    """Blocks come from the queue front with ref_cnt 1; over-asking raises and changes nothing."""
    pool = BlockPool(6, False, BS)
    got = pool.get_new_blocks(3)
    assert [b.block_id for b in got] == [1, 2, 3] and all(b.ref_cnt == 1 for b in got)
    with pytest.raises(ValueError, match="Cannot get 3 free blocks"):
        pool.get_new_blocks(3)
    assert queue_ids(pool) == [4, 5]
    pool.check_invariants()


def test_free_appends_in_given_order_and_keeps_shared() -> None:
    """free_blocks appends blocks reaching 0 at the tail in order; shared ones stay held."""
    pool = BlockPool(6, False, BS)
    b1, b2, b3 = pool.get_new_blocks(3)
    pool.touch([b2])
    pool.free_blocks([b3, b2, b1])
    assert queue_ids(pool) == [4, 5, 3, 1]
    assert b2.ref_cnt == 1
    pool.free_blocks([b2])
    assert queue_ids(pool) == [4, 5, 3, 1, 2]
    pool.check_invariants()


def test_double_free_raises_and_changes_nothing() -> None:
    """Freeing a free block raises ValueError naming it; ref counts and queue are unchanged."""
    pool = BlockPool(5, False, BS)
    b1, b2 = pool.get_new_blocks(2)
    pool.free_blocks([b1])
    before = queue_ids(pool)
    with pytest.raises(ValueError, match="block 1"):
        pool.free_blocks([b2, b1])
    assert b2.ref_cnt == 1 and b1.ref_cnt == 0 and queue_ids(pool) == before
    pool.check_invariants()


def test_touch_pulls_free_block_out_of_queue() -> None:
    """Touching a free block removes it from the queue; touching a held one only counts."""
    pool = BlockPool(5, True, BS)
    b1, b2 = pool.get_new_blocks(2)
    pool.free_blocks([b1])
    pool.touch([b1, b2])
    assert b1.ref_cnt == 1 and b2.ref_cnt == 2
    assert queue_ids(pool) == [3, 4]
    pool.check_invariants()


def test_cache_full_blocks_sets_keys() -> None:
    """Full blocks get hash + group id keys and are found by get_cached_block; ref_cnt stays."""
    pool = BlockPool(6, True, BS)
    request = hashed_request(list(range(10)))
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(request, blocks, 0, 2, BS, 0)
    assert blocks[0].block_hash == key(request, 0) and blocks[1].block_hash == key(request, 1)
    assert blocks[2].block_hash is None and all(b.ref_cnt == 1 for b in blocks)
    assert pool.get_cached_block(request.block_hashes[1], [0]) == [blocks[1]]
    assert pool.get_cached_block(request.block_hashes[1], [0, 1]) is None
    pool.cache_full_blocks(request, blocks, 2, 2, BS, 0)
    assert len(pool.cached_block_hash_to_block) == 2


def test_cache_full_blocks_with_larger_blocks_than_hashes() -> None:
    """Blocks of 2 x the hash block size are keyed by their two small hashes joined."""
    pool = BlockPool(6, True, BS)
    request = hashed_request(list(range(17)))  # 4 hashed blocks of 4 tokens
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(request, blocks, 1, 2, 2 * BS, 0)
    assert blocks[0].block_hash is None
    assert blocks[1].block_hash == b"".join(request.block_hashes[2:4]) + (0).to_bytes(4, "big")


def test_cache_full_blocks_skips_null_and_checks_hashes() -> None:
    """Null blocks are skipped; too few request hashes or a re-hash raise ValueError."""
    pool = BlockPool(6, True, BS)
    request = hashed_request(list(range(8)))
    blocks = [pool.null_block, *pool.get_new_blocks(1)]
    pool.cache_full_blocks(request, blocks, 0, 2, BS, 0)
    assert pool.null_block.block_hash is None and blocks[1].block_hash == key(request, 1)
    with pytest.raises(ValueError, match="too few"):
        pool.cache_full_blocks(request, blocks, 0, 3, BS, 0)
    with pytest.raises(ValueError, match="already has hash"):
        pool.cache_full_blocks(request, blocks, 1, 2, BS, 0)


def test_lazy_eviction_and_hit_on_evictable_block() -> None:
    """A freed cached block stays findable until reused; reuse drops its cache entry."""
    pool = BlockPool(3, True, BS)
    request = hashed_request(list(range(4)))
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(request, [block], 0, 1, BS, 0)
    pool.free_blocks([block])
    assert pool.get_cached_block(request.block_hashes[0], [0]) == [block]
    assert pool.get_num_free_blocks() == 2
    got = pool.get_new_blocks(2)
    assert [b.block_id for b in got] == [2, 1]
    assert block.block_hash is None
    assert pool.get_cached_block(request.block_hashes[0], [0]) is None
    pool.check_invariants()


def test_duplicate_cached_blocks() -> None:
    """Two blocks with the same hash are both cached; the earliest answers; evicting one keeps the other."""
    pool = BlockPool(6, True, BS)
    a, b = hashed_request(list(range(4)), "a"), hashed_request(list(range(4)), "b")
    (block_a,) = pool.get_new_blocks(1)
    (block_b,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(a, [block_a], 0, 1, BS, 0)
    pool.cache_full_blocks(b, [block_b], 0, 1, BS, 0)
    assert len(pool.cached_block_hash_to_block) == 1
    assert pool.get_cached_block(a.block_hashes[0], [0]) == [block_a]
    pool.free_blocks([block_a, block_b])
    pool.evict_blocks({block_a.block_id})
    assert pool.get_cached_block(a.block_hashes[0], [0]) == [block_b]
    pool.check_invariants()


def test_hash_map_pop_semantics() -> None:
    """pop removes only the given id; a dict entry stays a dict; misses return None."""
    cache = BlockHashToBlockMap()
    b1, b2, b3 = KVCacheBlock(1), KVCacheBlock(2), KVCacheBlock(3)
    cache.insert(b"k", b1)
    assert cache.pop(b"k", 2) is None and cache.get_one_block(b"k") is b1
    cache.insert(b"k", b2)
    cache.insert(b"k", b3)
    assert cache.get_one_block(b"k") is b1
    assert cache.pop(b"k", 1) is b1 and cache.pop(b"k", 2) is b2
    assert cache._cache[b"k"] == {3: b3}
    assert cache.pop(b"k", 3) is b3 and len(cache) == 0
    assert cache.pop(b"absent", 1) is None and cache.get_one_block(b"absent") is None


def test_evict_blocks_touches_cache_only() -> None:
    """evict_blocks drops cache entries but not ref counts or queue places; bad ids raise."""
    pool = BlockPool(4, True, BS)
    request = hashed_request(list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(request, blocks, 0, 2, BS, 0)
    pool.evict_blocks({1, 3})
    assert blocks[0].block_hash is None and blocks[0].ref_cnt == 1
    assert blocks[1].block_hash is not None and queue_ids(pool) == [3]
    with pytest.raises(ValueError, match="block id 4"):
        pool.evict_blocks({4})


def test_maybe_evict_keeps_hash_when_not_in_map() -> None:
    """A hashed block missing from the map keeps its hash field when reused (0.14 quirk)."""
    pool = BlockPool(3, True, BS)
    (block,) = pool.get_new_blocks(1)
    block.block_hash = b"orphan-key"
    pool.free_blocks([block])
    assert pool._maybe_evict_cached_block(block) is False
    assert block.block_hash == b"orphan-key"


def test_reset_prefix_cache_refuses_while_in_use() -> None:
    """reset returns False and keeps hashes while blocks are held; succeeds once all are free."""
    pool = BlockPool(5, True, BS)
    request = hashed_request(list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(request, blocks, 0, 2, BS, 0)
    assert pool.reset_prefix_cache() is False
    assert blocks[0].block_hash is not None and len(pool.cached_block_hash_to_block) == 2
    pool.free_blocks(reversed(blocks))
    order = queue_ids(pool)
    assert pool.reset_prefix_cache() is True
    assert (
        all(b.block_hash is None for b in pool.blocks) and len(pool.cached_block_hash_to_block) == 0
    )
    assert queue_ids(pool) == order == [3, 4, 2, 1]


def test_check_invariants_detects_corruption() -> None:
    """check_invariants raises when a held block sits in the queue or a key is wrong."""
    pool = BlockPool(4, True, BS)
    pool.check_invariants()
    pool.blocks[2].ref_cnt = 1
    with pytest.raises(AssertionError, match="block 2"):
        pool.check_invariants()
    pool.blocks[2].ref_cnt = 0
    pool.cached_block_hash_to_block.insert(b"key", pool.blocks[3])
    with pytest.raises(AssertionError, match="wrong key"):
        pool.check_invariants()


def _freed_queue(pool: BlockPool) -> list[int]:
    """Hash block 1 of [1, 2, 3], free them last-first, return the queue."""
    b1, b2, b3 = pool.get_new_blocks(3)
    if pool.enable_caching:
        request = hashed_request(list(range(4)))
        pool.cache_full_blocks(request, [b1], 0, 1, BS, 0)
    pool.free_blocks([b3, b2, b1])
    pool.check_invariants()
    return queue_ids(pool)


@pytest.mark.parametrize(("free_order", "caching", "queue"), [
    ("append", True, [4, 5, 3, 2, 1]),
    ("swa_split", True, [4, 5, 3, 2, 1]),
    ("lifo_unhashed", True, [3, 2, 4, 5, 1]),
    ("lifo_cached_only", True, [3, 2, 4, 5, 1]),
    ("lifo_unhashed", False, [3, 2, 1, 4, 5]),
    ("lifo_cached_only", False, [4, 5, 3, 2, 1]),
])
def test_free_order_modes(free_order: str, caching: bool, queue: list[int]) -> None:
    """C1: unhashed blocks reaching 0 go to the front (in order) under the lifo modes; with
    caching off every block under lifo_unhashed and none under lifo_cached_only (0.27)."""
    assert _freed_queue(BlockPool(6, caching, BS, free_order=free_order)) == queue


def test_free_blocks_prepend_argument() -> None:
    """free_blocks(prepend=True) puts freed unhashed blocks at the front (0.23's SWA split)."""
    pool = BlockPool(6, True, BS)
    b1, b2, b3 = pool.get_new_blocks(3)
    pool.cache_full_blocks(hashed_request(list(range(4))), [b1], 0, 1, BS, 0)
    pool.free_blocks([b3, b2, b1], prepend=True)
    assert queue_ids(pool) == [3, 2, 4, 5, 1]


@pytest.mark.parametrize(("mode", "after_touch", "after_free"), [
    ("counted", 2, 0), ("untracked", 0, 0),
])
def test_null_block_ref_cnt(mode: str, after_touch: int, after_free: int) -> None:
    """C2: touch/free count the null block (0.14) or skip it (0.33); it never enters the queue."""
    pool = BlockPool(4, True, BS, null_block_ref_cnt=mode)
    null = pool.null_block
    pool.touch([null, null])
    assert null.ref_cnt == after_touch
    pool.free_blocks([null, null])
    assert null.ref_cnt == after_free and queue_ids(pool) == [1, 2, 3]
    pool.free_blocks([null])
    assert null.ref_cnt == (-1 if mode == "counted" else 0)


def test_cache_full_blocks_mask() -> None:
    """A block masked out is left unhashed, like a null block (0.23+ sliding window)."""
    pool = BlockPool(6, True, BS)
    request = hashed_request(list(range(8)))
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(request, blocks, 0, 2, BS, 0, block_mask=[False, True])
    assert blocks[0].block_hash is None and blocks[1].block_hash == key(request, 1)


def test_unknown_switch_values_rejected() -> None:
    """Bad switch values name the switch."""
    with pytest.raises(ValueError, match="free_order"):
        BlockPool(4, True, BS, free_order="fifo")
    with pytest.raises(ValueError, match="null_block_ref_cnt"):
        BlockPool(4, True, BS, null_block_ref_cnt="maybe")
