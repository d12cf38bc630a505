"""Unit tests for allocator/block.py: the KVCacheBlock record."""

from __future__ import annotations

import pytest

from allocator.block import KVCacheBlock


def test_defaults() -> None:
    """A new block is unreferenced, unhashed, unlinked and not null."""
    block = KVCacheBlock(3)
    assert (block.block_id, block.ref_cnt, block.block_hash, block.is_null) == (3, 0, None, False)
    assert block.prev_free_block is None and block.next_free_block is None


def test_hash_set_twice_raises() -> None:
    """Setting a hash on a hashed block raises ValueError naming the block; reset allows it."""
    block = KVCacheBlock(7)
    block.block_hash = b"a" * 8
    with pytest.raises(ValueError, match="block 7"):
        block.block_hash = b"b" * 8
    assert block.block_hash == b"a" * 8
    block.reset_hash()
    block.block_hash = b"b" * 8
    assert block.block_hash == b"b" * 8


def test_identity_equality() -> None:
    """Blocks compare by identity, not by field values."""
    assert KVCacheBlock(1) != KVCacheBlock(1)
    block = KVCacheBlock(1)
    same = block
    assert block == same


def test_repr_shows_neighbour_ids() -> None:
    """repr names linked neighbours by id instead of recursing into them."""
    a, b = KVCacheBlock(1), KVCacheBlock(2)
    a.next_free_block, b.prev_free_block = b, a
    assert "next_free_block=2" in repr(a) and "prev_free_block=1" in repr(b)
