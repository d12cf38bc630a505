"""Unit tests for allocator/sliding_window_manager.py: the 0.23+ caching mask and the 0.23
split free (the manager's skipping and hit search are covered by test_single_type_manager)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from allocator.block_pool import BlockPool
from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.kv_cache_spec import SlidingWindowSpec
from allocator.profiles import profile_for
from allocator.request import Request
from allocator.sliding_window_manager import get_manager_for_kv_cache_spec, reachable_block_mask


@pytest.mark.parametrize(("window", "retention", "prompt", "mask"), [
    (4, None, 13, None),                                   # need 2 >= 1 segment block: dense
    (1, None, 13, [False] * 6),                            # need 0: nothing can end a hit
    (4, 0, 13, [False, False, False, False, True, True]),  # tail before token 12's block
    (4, 0, 12, [False, False, False, True, True, False]),  # boundary token 11 -> block 5
    (3, 8, 40, [False, False, False, True, False, False]),  # 4-block segments, need 1
    (1, 0, 13, [False] * 6),
])
def test_reachable_block_mask(window: int, retention: int | None, prompt: int,
                              mask: list[bool] | None) -> None:
    """The mask over blocks 0-5 (bs 2) is what vLLM 0.33.0's reachable_block_mask returned."""
    assert reachable_block_mask(0, 6, 2, window, retention, prompt) == mask


def test_mask_of_a_sub_range() -> None:
    """A later cache call masks only its own range, indexed from its start block."""
    assert reachable_block_mask(4, 8, 2, 4, 0, 13) == [True, True, False, False]


def _manager(version: str, caching: bool = True, retention: int | None = None):  # type: ignore[no-untyped-def]
    profile = profile_for(version).replace(prefix_cache_retention_interval=retention)
    pool = BlockPool(10, caching, 2, free_order=profile.free_order)
    return get_manager_for_kv_cache_spec(SlidingWindowSpec(2, 4), pool, caching, 0,
                                         profile=profile)


def test_split_free_0_23() -> None:
    """0.23 frees a sliding-window request's hashed blocks to the tail, unhashed to the front."""
    init_none_hash(sha256)
    manager = _manager("0.23")
    request = Request("r", range(5), 4, block_hasher=get_request_block_hasher(2, sha256))
    manager.allocate_new_blocks("r", 5)
    manager.cache_blocks(request, 5)
    manager.free("r")
    queue = [b.block_id for b in manager.block_pool.free_block_queue.get_all_free_blocks()]
    assert queue == [3, 4, 5, 6, 7, 8, 9, 2, 1]


def test_retention_must_be_a_block_multiple() -> None:
    """A positive retention interval must be a multiple of the block size."""
    with pytest.raises(ValueError, match="multiple of the block size"):
        _manager("0.33", retention=3)


def test_reachable_block_mask_with_the_eagle_drop() -> None:
    """72 masks recorded from vLLM 0.23.0, 0.27.0 and 0.33.0 (the same in each), with and
    without EAGLE's last-block drop (need one block more, the run shifted one block)."""
    data = json.loads((Path(__file__).parents[1] / "data" / "vllm_swa_masks.json").read_text())
    assert len(data["cases"]) == 72
    for window, retention, prompt, eagle, start, want in data["cases"]:
        got = reachable_block_mask(start, 16, 16, window, retention, prompt, eagle)
        expected = None if want is None else [bool(x) for x in want]
        assert got == expected, (window, retention, prompt, eagle, start)


def test_eagle_drop_reaches_the_sliding_window_mask() -> None:
    """KVCacheManager's use_eagle and hash_lookahead_tokens set the group's eagle_drop, which
    the cache mask and the hit search read: on with EAGLE, off again with 0.33's lookahead."""
    from allocator.kv_cache_manager import KVCacheManager
    from allocator.kv_cache_spec import KVCacheConfig

    manager = KVCacheManager(KVCacheConfig(num_blocks=64, block_size=16, sliding_window=64),
                             1024, vllm_profile=profile_for("0.27"))
    assert not manager.single_type_manager.eagle_drop
    manager.use_eagle = True
    assert manager.single_type_manager.eagle_drop
    manager.hash_lookahead_tokens = 1
    assert not manager.single_type_manager.eagle_drop
    manager.hash_lookahead_tokens = 0
    assert manager.single_type_manager.eagle_drop and manager.use_eagle
