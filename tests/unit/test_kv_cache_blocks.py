"""Unit tests for allocator/kv_cache_blocks.py: the per-group allocation result."""

from __future__ import annotations

import pytest

from allocator.block import KVCacheBlock
from allocator.kv_cache_blocks import KVCacheBlocks


def test_get_block_ids_tuple_of_lists() -> None:
    """Block ids come back as a tuple with one list per group; allow_none maps empty to None."""
    blocks = KVCacheBlocks(([KVCacheBlock(3), KVCacheBlock(1)],))
    assert blocks.get_block_ids() == ([3, 1],)
    empty = KVCacheBlocks(((),))
    assert empty.get_block_ids() == ([],)
    assert empty.get_block_ids(allow_none=True) is None
    assert blocks.get_block_ids(allow_none=True) == ([3, 1],)


def test_add_concatenates_per_group() -> None:
    """+ concatenates group by group."""
    a = KVCacheBlocks(([KVCacheBlock(1)], [KVCacheBlock(5)]))
    b = KVCacheBlocks(([KVCacheBlock(2)], []))
    assert (a + b).get_block_ids() == ([1, 2], [5])


def test_unhashed_ids_and_new_empty() -> None:
    """get_unhashed_block_ids lists blocks without a hash; new_empty keeps the group count."""
    hashed = KVCacheBlock(4)
    hashed.block_hash = b"h"
    blocks = KVCacheBlocks(([hashed, KVCacheBlock(6)],))
    assert blocks.get_unhashed_block_ids() == [6]
    assert KVCacheBlocks(([], [])).new_empty().blocks == ((), ())
    with pytest.raises(ValueError, match="one group"):
        KVCacheBlocks(([], [])).get_unhashed_block_ids()
