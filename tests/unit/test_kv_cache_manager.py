"""Unit tests for allocator/kv_cache_manager.py, including the spec's section 10 examples."""

from __future__ import annotations

import pytest

from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.kv_cache_blocks import KVCacheBlocks
from allocator.kv_cache_manager import KVCacheManager
from allocator.kv_cache_spec import KVCacheConfig
from allocator.request import Request

BS = 16


@pytest.fixture(autouse=True)
def _seed() -> None:
    init_none_hash(sha256)


def make_manager(num_blocks: int = 11, bs: int = BS, **kwargs) -> KVCacheManager:
    window = kwargs.pop("sliding_window", None)
    return KVCacheManager(KVCacheConfig(num_blocks, bs, window), max_model_len=8192, **kwargs)


def make_request(rid: str, tokens, bs: int = BS, **kwargs) -> Request:
    return Request(
        rid, list(tokens), 16, block_hasher=get_request_block_hasher(bs, sha256), **kwargs
    )


def admit(manager: KVCacheManager, request: Request) -> tuple[list[int], list[int]]:
    """get_computed_blocks then allocate_slots for the rest of the prompt; (hit ids, new ids)."""
    hit_blocks, num_hit = manager.get_computed_blocks(request)
    new = manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, hit_blocks)
    assert new is not None
    request.num_computed_tokens = request.num_tokens
    manager.check_invariants()
    return hit_blocks.get_block_ids()[0], new.get_block_ids()[0]


def queue_ids(manager: KVCacheManager) -> list[int]:
    return [b.block_id for b in manager.block_pool.free_block_queue.get_all_free_blocks()]


def test_section10_prefill_and_reuse() -> None:
    """Spec 10: ids [1,2,3,4], hits [1,2,3], queue [6..10,4,5,3,2,1], req3 evicts in queue order."""
    manager = make_manager()
    common = [0] * 16 + [1] * 16 + [2] * 16
    req0 = make_request("0", common + [3] * 7)
    assert admit(manager, req0) == ([], [1, 2, 3, 4])
    blocks = manager.block_pool.blocks
    assert all(blocks[i].block_hash is not None for i in (1, 2, 3))
    assert blocks[4].block_hash is None
    req1 = make_request("1", common + [3] * 5)
    assert admit(manager, req1) == ([1, 2, 3], [5])
    assert [blocks[i].ref_cnt for i in (1, 2, 3)] == [2, 2, 2]
    assert manager.block_pool.get_num_free_blocks() == 5
    manager.free(req0)
    manager.free(req1)
    assert manager.block_pool.get_num_free_blocks() == 10
    assert queue_ids(manager) == [6, 7, 8, 9, 10, 4, 5, 3, 2, 1]
    req2 = make_request("2", common + [3] * 6)
    assert admit(manager, req2) == ([1, 2, 3], [6])
    manager.free(req2)
    req3 = make_request("3", [99] * 160)
    assert admit(manager, req3) == ([], [7, 8, 9, 10, 4, 5, 6, 3, 2, 1])
    assert queue_ids(manager) == []


def test_section10_eviction_order() -> None:
    """Spec 10: queue [10,6,5,4,3,2,1,9,8,7] after frees; range(35) hits [1,2] and gets [10]."""
    manager = make_manager()
    req0, req1 = make_request("0", range(87)), make_request("1", range(87, 135))
    assert admit(manager, req0) == ([], [1, 2, 3, 4, 5, 6])
    assert admit(manager, req1) == ([], [7, 8, 9])
    assert manager.block_pool.get_num_free_blocks() == 1
    manager.free(req0)
    manager.free(req1)
    assert queue_ids(manager) == [10, 6, 5, 4, 3, 2, 1, 9, 8, 7]
    assert admit(manager, make_request("2", range(35))) == ([1, 2], [10])
    assert manager.block_pool.get_num_free_blocks() == 7


def test_hit_capped_at_num_tokens_minus_one() -> None:
    """A fully cached 48-token prompt hits only 2 blocks (32 tokens): the last token recomputes."""
    manager = make_manager()
    admit(manager, make_request("a", range(48)))
    hit_blocks, num_hit = manager.get_computed_blocks(make_request("b", range(48)))
    assert num_hit == 32 and hit_blocks.get_block_ids() == ([1, 2],)
    _, num_hit = manager.get_computed_blocks(make_request("c", range(49)))
    assert num_hit == 48


def test_hit_on_evictable_blocks_counts_toward_need() -> None:
    """Hits sitting in the free queue count as blocks to allocate and are pulled out on touch."""
    manager = make_manager(num_blocks=5)
    first = make_request("a", range(48))
    admit(manager, first)
    manager.free(first)
    second = make_request("b", range(64))
    hit_blocks, num_hit = manager.get_computed_blocks(second)
    assert num_hit == 48
    assert manager.allocate_slots(second, 16, num_hit, hit_blocks).get_block_ids() == ([4],)
    assert manager.get_block_ids("b") == ([1, 2, 3, 4],)
    assert manager.block_pool.get_num_free_blocks() == 0


def test_failed_allocation_changes_nothing() -> None:
    """When hits plus new blocks exceed the free pool, None is returned and no ref_cnt moves."""
    manager = make_manager(num_blocks=6)
    first = make_request("a", range(48))
    admit(manager, first)
    manager.free(first)
    hog = make_request("hog", [7] * 16)
    admit(manager, hog)
    before = queue_ids(manager), [b.ref_cnt for b in manager.block_pool.blocks[1:]]
    big = make_request("big", list(range(48)) + [5] * 40)
    hit_blocks, num_hit = manager.get_computed_blocks(big)
    assert num_hit == 48
    assert manager.allocate_slots(big, big.num_tokens - num_hit, num_hit, hit_blocks) is None
    assert (queue_ids(manager), [b.ref_cnt for b in manager.block_pool.blocks[1:]]) == before
    assert manager.get_block_ids("big") == ([],)
    manager.check_invariants()


def test_allocate_nothing_raises() -> None:
    """allocate_slots with no new and no external tokens raises ValueError."""
    manager = make_manager()
    with pytest.raises(ValueError, match="num_new_tokens"):
        manager.allocate_slots(make_request("a", range(4)), 0)
    with pytest.raises(ValueError, match="num_new_tokens"):
        manager.allocate_slots(make_request("a", range(4)), -1)


def test_free_without_blocks_is_noop() -> None:
    """Freeing a request that holds no blocks changes nothing."""
    manager = make_manager()
    manager.free(make_request("ghost", range(4)))
    assert manager.block_pool.get_num_free_blocks() == 10
    manager.check_invariants()


def test_decode_allocates_at_block_boundary_and_caches() -> None:
    """Decode steps allocate one block per block_size tokens and hash blocks as they fill."""
    manager = make_manager()
    request = make_request("a", range(15))
    admit(manager, request)
    request.append_output_token_ids(1)
    assert manager.allocate_slots(request, 1).get_block_ids() == ([],)
    request.num_computed_tokens += 1
    assert manager.block_pool.blocks[1].block_hash is not None
    request.append_output_token_ids(2)
    assert manager.allocate_slots(request, 1).get_block_ids() == ([2],)
    assert manager.get_block_ids("a") == ([1, 2],)


def test_lookahead_slots_are_allocated_not_cached() -> None:
    """Lookahead tokens get slots but blocks beyond request.num_tokens are not cached."""
    manager = make_manager()
    request = make_request("a", range(14))
    new = manager.allocate_slots(request, 14, num_lookahead_tokens=4)
    assert new.get_block_ids() == ([1, 2],)
    assert manager.block_pool.blocks[1].block_hash is None


def test_max_model_len_caps_slots() -> None:
    """Slots never exceed max_model_len."""
    manager = KVCacheManager(KVCacheConfig(11, BS), max_model_len=20)
    request = make_request("a", range(18))
    assert manager.allocate_slots(request, 18, num_lookahead_tokens=10).get_block_ids() == ([1, 2],)


def test_sliding_window_frees_out_of_window_blocks() -> None:
    """With a window of 16 and bs 4, blocks behind the window become null (id 0) and are freed."""
    manager = make_manager(num_blocks=20, bs=4, sliding_window=16)
    request = make_request("a", range(20), bs=4)
    admit(manager, request)
    assert manager.get_block_ids("a") == ([1, 2, 3, 4, 5],)
    for token in range(6):
        request.append_output_token_ids(token)
        assert manager.allocate_slots(request, 1) is not None
        request.num_computed_tokens += 1
    assert manager.get_block_ids("a") == ([0, 0, 3, 4, 5, 6, 7],)
    assert queue_ids(manager)[-2:] == [1, 2]
    manager.check_invariants()
    manager.free(request)
    assert manager.block_pool.get_num_free_blocks() == 19


def test_sliding_window_hit_pads_with_null_blocks() -> None:
    """A sliding-window hit of a long prompt is nulls followed by the last window's blocks."""
    manager = make_manager(num_blocks=30, bs=4, sliding_window=8)
    first = make_request("a", range(40), bs=4)
    admit(manager, first)
    manager.free(first)
    second = make_request("b", range(41), bs=4)
    hit_blocks, num_hit = manager.get_computed_blocks(second)
    assert num_hit == 40
    assert hit_blocks.get_block_ids() == ([0] * 8 + [9, 10],)
    new = manager.allocate_slots(second, 1, num_hit, hit_blocks)
    assert new is not None and new.get_block_ids() == ([11],)
    assert manager.get_block_ids("b") == ([0] * 8 + [9, 10, 11],)
    assert manager.block_pool.blocks[9].ref_cnt == 1 and manager.block_pool.blocks[1].ref_cnt == 0
    manager.check_invariants()


def test_skip_reading_prefix_cache_makes_duplicates() -> None:
    """A request that skips the cache read gets fresh blocks, cached beside the originals."""
    manager = make_manager()
    admit(manager, make_request("a", range(33)))
    skipper = make_request("b", range(33), skip_reading_prefix_cache=True)
    assert admit(manager, skipper) == ([], [4, 5, 6])
    cache = manager.block_pool.cached_block_hash_to_block
    assert len(cache) == 2
    assert all(len(blocks) == 2 for _, blocks in cache.items())


def test_prefix_cache_stats() -> None:
    """Queries and hits are recorded in tokens, preempted requests apart; making stats resets."""
    manager = make_manager(log_stats=True)
    admit(manager, make_request("a", range(40)))
    again = make_request("b", range(40))
    again.num_preemptions = 1
    manager.get_computed_blocks(again)
    manager.get_computed_blocks(make_request("c", range(33)))
    stats = manager.make_prefix_cache_stats()
    assert (stats.requests, stats.queries, stats.hits) == (2, 73, 32)
    assert (stats.preempted_requests, stats.preempted_queries, stats.preempted_hits) == (1, 40, 32)
    fresh = manager.make_prefix_cache_stats()
    assert fresh.requests == 0 and fresh is not stats
    assert make_manager().make_prefix_cache_stats() is None


def test_reset_prefix_cache() -> None:
    """Reset refuses while a request holds blocks and marks stats reset when it succeeds."""
    manager = make_manager(log_stats=True)
    request = make_request("a", range(40))
    admit(manager, request)
    assert manager.reset_prefix_cache() is False
    assert manager.get_computed_blocks(make_request("b", range(40)))[1] == 32
    manager.free(request)
    assert manager.reset_prefix_cache() is True
    assert manager.prefix_cache_stats.reset is True
    assert manager.get_computed_blocks(make_request("c", range(40)))[1] == 0


def test_common_prefix_and_caching_off() -> None:
    """Common-prefix blocks count shared leading blocks; caching off gives no hits and [0]."""
    manager = make_manager()
    admit(manager, make_request("a", range(40)))
    admit(manager, make_request("b", range(40)))
    assert manager.get_num_common_prefix_blocks("a") == [2]
    off = make_manager(enable_caching=False)
    admit(off, make_request("a", range(40)))
    hit_blocks, num_hit = off.get_computed_blocks(make_request("b", range(40)))
    assert (hit_blocks.get_block_ids(), num_hit) == (([],), 0)
    assert off.get_num_common_prefix_blocks("a") == [0]
    assert off.block_pool.blocks[1].block_hash is None


def test_usage_evict_and_get_blocks() -> None:
    """usage follows held blocks; evict_blocks forwards to the pool; get_blocks lists all."""
    manager = make_manager()
    request = make_request("a", range(40))
    admit(manager, request)
    assert manager.usage == pytest.approx(0.3)
    manager.evict_blocks({1})
    assert manager.block_pool.blocks[1].block_hash is None
    assert isinstance(manager.get_blocks("a"), KVCacheBlocks)
    assert manager.get_blocks("none") is manager.empty_kv_cache_blocks
    manager.cache_blocks(request, 40)
    assert manager.block_pool.blocks[2].block_hash is not None


def test_constructor_validation() -> None:
    """Mismatched hash block size, bad sizes and bad max_model_len raise ValueError."""
    with pytest.raises(ValueError, match="hash_block_size"):
        KVCacheManager(KVCacheConfig(4, 16), 64, hash_block_size=8)
    with pytest.raises(ValueError, match="max_model_len"):
        KVCacheManager(KVCacheConfig(4, 16), 0)
    with pytest.raises(ValueError, match="num_blocks"):
        KVCacheConfig(0, 16)
    with pytest.raises(ValueError, match="block_size"):
        KVCacheConfig(4, 0)
    with pytest.raises(ValueError, match="sliding_window"):
        KVCacheConfig(4, 16, 0)


def lookahead_request(rid: str, tokens, lookahead: int, bs: int = BS) -> Request:
    hasher = get_request_block_hasher(bs, sha256, "tagged", lookahead)
    return Request(rid, list(tokens), 16, block_hasher=hasher)


@pytest.mark.parametrize("window", [None, 33])
def test_lookahead_hashes_keep_the_last_eagle_hit_block(window: int | None) -> None:
    """Two requests sharing 40 tokens (vLLM 0.33's minimal stream, EAGLE): with lookahead
    hashes block 1's hash covers token 32, shared, so the hit keeps it (32 tokens, as vLLM's
    scheduler gave); the legacy hashes drop it (16). Sliding window: the same as no EAGLE."""
    shared = list(range(40))
    hits = {}
    for use_eagle, lookahead in ((True, 1), (True, 0), (False, 1)):
        manager = make_manager(num_blocks=20, sliding_window=window)
        manager.use_eagle = use_eagle
        manager.hash_lookahead_tokens = lookahead
        admit(manager, lookahead_request("a", shared + [50, 51], lookahead))
        second = lookahead_request("b", shared + [52, 53], lookahead)
        hits[use_eagle, lookahead] = manager.get_computed_blocks(second)[1]
    assert hits[True, 1] == hits[False, 1] == 32
    assert hits[True, 0] == 16 if window is None else hits[True, 0] < 32


def test_cache_blocks_waits_for_the_lookahead_token() -> None:
    """A 32-token prompt with lookahead hashes caches only block 0 at prefill: block 1's hash
    needs token 32, the first output; once it is appended, block 1 is cached."""
    manager = make_manager()
    request = lookahead_request("a", range(32), 1)
    admit(manager, request)
    blocks = manager.block_pool.blocks
    assert len(request.block_hashes) == 1
    assert blocks[1].block_hash is not None and blocks[2].block_hash is None
    request.append_output_token_ids(7)
    assert manager.allocate_slots(request, 1) is not None
    request.num_computed_tokens += 1
    assert len(request.block_hashes) == 2 and blocks[2].block_hash is not None
    manager.check_invariants()
