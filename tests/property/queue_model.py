"""A list model of the free queue and a dict of ref counts, fed by every pool call.

:class:`QueueModel` wraps a ``BlockPool``'s ``get_new_blocks``, ``touch`` and ``free_blocks``
so that each call the manager makes is first applied to a plain list (front first) and dict,
following the release profile's free-order (C1) and null-block (C2) rules as the semantics
doc states them; :meth:`check` compares the model with the pool's linked queue.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from allocator.block import KVCacheBlock
from allocator.block_pool import BlockPool
from allocator.profiles import VllmProfile


class QueueModel:
    """The free queue as a list, ref counts as a dict, beside a real pool."""

    def __init__(self, pool: BlockPool, profile: VllmProfile) -> None:
        self.pool = pool
        self.profile = profile
        self.queue = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
        self.ref = {b.block_id: b.ref_cnt for b in pool.blocks}
        self._wrap()

    def _wrap(self) -> None:
        pool = self.pool
        get_new, touch, free = pool.get_new_blocks, pool.touch, pool.free_blocks

        def get_new_blocks(num_blocks: int) -> list[KVCacheBlock]:
            blocks = get_new(num_blocks)
            assert [b.block_id for b in blocks] == self.queue[:num_blocks], "not the queue front"
            del self.queue[:num_blocks]
            for block in blocks:
                self.ref[block.block_id] = 1
            return blocks

        def touch_blocks(blocks: Iterable[KVCacheBlock]) -> None:
            blocks = list(blocks)
            for block in blocks:
                self._touch(block)
            touch(blocks)

        def free_blocks(blocks: Iterable[KVCacheBlock], prepend: bool = False) -> None:
            blocks = list(blocks)
            self._free(blocks, prepend)
            free(blocks, prepend)

        pool.get_new_blocks = get_new_blocks  # type: ignore[method-assign]
        pool.touch = touch_blocks  # type: ignore[method-assign]
        pool.free_blocks = free_blocks  # type: ignore[method-assign]

    def _counts_null(self) -> bool:
        return self.profile.null_block_ref_cnt == "counted"

    def _touch(self, block: KVCacheBlock) -> None:
        bid = block.block_id
        if block.is_null:
            self.ref[bid] += self._counts_null()
            return
        if self.ref[bid] == 0:
            self.queue.remove(bid)
        self.ref[bid] += 1

    def _to_front(self, block: KVCacheBlock, prepend: bool) -> bool:
        """An unhashed block, with prepend (the 0.23 sliding-window split) or a lifo mode."""
        order, unhashed = self.profile.free_order, block.block_hash is None
        if prepend or order == "lifo_unhashed":
            return unhashed
        return order == "lifo_cached_only" and unhashed and self.pool.enable_caching

    def _free(self, blocks: list[KVCacheBlock], prepend: bool) -> None:
        front: list[int] = []
        back: list[int] = []
        for block in blocks:
            bid = block.block_id
            if block.is_null:
                self.ref[bid] -= self._counts_null()
                continue
            self.ref[bid] -= 1
            if self.ref[bid] == 0:
                (front if self._to_front(block, prepend) else back).append(bid)
        self.queue = front + self.queue + back

    def check(self) -> None:
        """The pool's queue and ref counts equal the model's."""
        pool: Any = self.pool
        assert [b.block_id for b in pool.free_block_queue.get_all_free_blocks()] == self.queue
        assert {b.block_id: b.ref_cnt for b in pool.blocks} == self.ref
