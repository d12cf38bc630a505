"""The block pool: every KV-cache block, the free queue and the prefix cache (vLLM v0.14+).

Blocks are handed out from the front of the free queue and freed to its tail (from vLLM 0.24,
blocks that can never hit go to the front: the profile's ``free_order``). A freed block that
was full keeps its hash and stays findable in the prefix cache ("evictable cached block") until
it is handed out again; only then is its cache entry dropped (lazy eviction). Block 0 is
reserved as the null block, so N blocks give N - 1 usable ones.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from allocator.block import KVCacheBlock
from allocator.block_hash_map import BlockHashToBlockMap
from allocator.free_queue import FreeKVCacheBlockQueue
from allocator.hashing import (
    GROUP_ID_SUFFIXES,
    BlockHash,
    BlockHashListWithBlockSize,
    group_id_suffix,
    make_block_hash_with_group_id,
)
from allocator.pool_invariants import check_pool
from allocator.profiles import CHOICES

if TYPE_CHECKING:
    from allocator.request import Request

__all__ = ["BlockHashToBlockMap", "BlockPool"]

logger = logging.getLogger(__name__)


class BlockPool:
    """All blocks of one pool.

    Invariants (see :meth:`check_invariants`): free + held == N - 1; a non-null block is in the
    free queue iff its ``ref_cnt`` is 0; every cached key points only at blocks carrying it.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool,
        hash_block_size: int,
        *,
        free_order: str = "append",
        null_block_ref_cnt: str = "counted",
    ) -> None:
        if free_order not in CHOICES["free_order"]:
            raise ValueError(f"unknown free_order {free_order!r}")
        if null_block_ref_cnt not in CHOICES["null_block_ref_cnt"]:
            raise ValueError(f"unknown null_block_ref_cnt {null_block_ref_cnt!r}")
        if num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1, got {num_gpu_blocks}")
        if hash_block_size < 1:
            raise ValueError(f"hash_block_size must be >= 1, got {hash_block_size}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.hash_block_size = hash_block_size
        self.blocks = [KVCacheBlock(idx) for idx in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        # Free blocks that still carry a hash (evictable cached blocks), kept so that the
        # memory snapshot is O(1); a pagedsim addition that changes no vLLM behaviour.
        self.num_cached_free_blocks = 0
        # Profile switches C1 and C2 (``allocator/profiles.py``), read by free_blocks/touch.
        self.free_order = free_order
        self.track_null_ref_cnt = null_block_ref_cnt == "counted"
        # With caching off no block has a hash: lifo_unhashed prepends every freed block,
        # lifo_cached_only (0.27) none.
        self._prepend_unhashed = free_order == "lifo_unhashed" or (
            free_order == "lifo_cached_only" and enable_caching
        )

    def get_cached_block(
        self, block_hash: BlockHash, kv_cache_group_ids: Sequence[int]
    ) -> list[KVCacheBlock] | None:
        """One cached block per group for ``block_hash``, or None if any group misses."""
        cached_blocks = []
        for group_id in kv_cache_group_ids:
            key = make_block_hash_with_group_id(block_hash, group_id)
            block = self.cached_block_hash_to_block.get_one_block(key)
            if block is None:
                return None
            cached_blocks.append(block)
        return cached_blocks

    def cache_full_blocks(
        self,
        request: Request,
        blocks: list[KVCacheBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        kv_cache_group_id: int,
        block_mask: Sequence[bool] | None = None,
    ) -> None:
        """Hash and index ``blocks[num_cached_blocks:num_full_blocks]``, skipping null blocks.

        Ref counts are unchanged. The hashes come from ``request.block_hashes``. With
        ``block_mask`` (one flag per block of the range, 0.23+ sliding window) a block whose
        flag is False is skipped like a null block: it stays unhashed.
        """
        if num_cached_blocks >= num_full_blocks:
            return
        block_hashes: Sequence[BlockHash] | BlockHashListWithBlockSize = request.block_hashes
        if len(block_hashes) * self.hash_block_size < num_full_blocks * block_size:
            raise ValueError(
                f"request {request.request_id!r} has {len(block_hashes)} block hashes, "
                f"too few to cache {num_full_blocks} blocks of size {block_size}"
            )
        if block_size != self.hash_block_size:
            block_hashes = BlockHashListWithBlockSize(
                request.block_hashes, self.hash_block_size, block_size
            )
        cache = self.cached_block_hash_to_block
        cache_dict = cache._cache
        # The suffix table indexed in place: this runs at every block that fills up, and a
        # Python call costs ~6% of it.
        suffix = (GROUP_ID_SUFFIXES[kv_cache_group_id]
                  if 0 <= kv_cache_group_id < len(GROUP_ID_SUFFIXES)
                  else group_id_suffix(kv_cache_group_id))
        indices: Iterable[int] = range(num_cached_blocks, num_full_blocks)
        if block_mask is not None:
            indices = [i for i in indices if block_mask[i - num_cached_blocks]]
        for i in indices:
            block = blocks[i]
            if block.is_null:
                continue
            key = block_hashes[i] + suffix
            if block._block_hash is not None:
                block.block_hash = key  # raises, naming the block
            block._block_hash = key
            # One dict operation for the common new key; a duplicate goes beside the others.
            if cache_dict.setdefault(key, block) is not block:
                cache.insert(key, block)

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take ``num_blocks`` from the front of the free queue, evicting their cache entries.

        Raises:
            ValueError: if fewer than ``num_blocks`` blocks are free.
        """
        queue = self.free_block_queue
        if num_blocks > queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        # One block (a decode step at a block boundary) skips popleft_n's list-building loop.
        ret = [queue.popleft()] if num_blocks == 1 else queue.popleft_n(num_blocks)
        if self.enable_caching:
            cache_dict = self.cached_block_hash_to_block._cache
            num_evicted = 0
            for block in ret:
                block_hash = block._block_hash
                if block_hash is not None:
                    num_evicted += 1
                    if cache_dict.get(block_hash) is block:
                        # The common case of _maybe_evict_cached_block, inlined.
                        del cache_dict[block_hash]
                        block._block_hash = None
                    else:
                        self._maybe_evict_cached_block(block)
                assert block.ref_cnt == 0
                block.ref_cnt = 1
            self.num_cached_free_blocks -= num_evicted
        else:
            for block in ret:
                assert block.ref_cnt == 0
                block.ref_cnt = 1
        return ret

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> bool:
        """Drop ``block`` from the prefix cache; True if it was cached under its hash."""
        block_hash = block.block_hash
        if block_hash is None:
            return False
        if self.cached_block_hash_to_block.pop(block_hash, block.block_id) is None:
            # vLLM 0.14 leaves the block's hash field set in this case.
            return False
        block.reset_hash()
        return True

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on each block (prefix hit), pulling free ones out of the queue."""
        queue = self.free_block_queue
        for block in blocks:
            if block.ref_cnt == 0 and not block.is_null:
                queue.remove(block)
                if block._block_hash is not None:
                    self.num_cached_free_blocks -= 1
            block.ref_cnt += 1
        if not self.track_null_ref_cnt:
            # Untracked (0.33): a hit's null entries leave the null block at 0.
            self.null_block.ref_cnt = 0

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock], prepend: bool = False) -> None:
        """Drop one reference per block and queue the blocks that reach 0, in this order.

        Freed blocks go to the queue tail (``free_order`` "append"). Unhashed ones go to the
        front instead, keeping their order, with ``prepend`` (the 0.23 sliding-window split)
        or under "lifo_unhashed"/"lifo_cached_only", so they are reused first while hashed
        blocks keep LRU order behind them.

        Raises:
            ValueError: on a double free (a non-null block whose ``ref_cnt`` would go below 0);
                nothing is changed in that case.
        """
        # Callers pass fresh lists (a request's reversed table); other iterables are copied.
        blocks_list = ordered_blocks if isinstance(ordered_blocks, list) else list(ordered_blocks)
        to_front = prepend or self._prepend_unhashed
        first: list[KVCacheBlock] = []
        last: list[KVCacheBlock] = []
        num_cached = 0
        for idx, block in enumerate(blocks_list):
            ref_cnt = block.ref_cnt - 1
            block.ref_cnt = ref_cnt
            if ref_cnt <= 0 and not block.is_null:
                if ref_cnt < 0:
                    self._undo_free(blocks_list[: idx + 1])
                    raise ValueError(f"double free of block {block.block_id} (ref_cnt was 0)")
                if block._block_hash is not None:
                    num_cached += 1
                    last.append(block)
                elif to_front:
                    first.append(block)
                else:
                    last.append(block)
        if not self.track_null_ref_cnt:
            # Untracked (0.33): the loop's decrement of a null entry is put back.
            self.null_block.ref_cnt = 0
        self.num_cached_free_blocks += num_cached
        if first:
            self.free_block_queue.prepend_n(first)
        self.free_block_queue.append_n(last)

    def _undo_free(self, blocks: list[KVCacheBlock]) -> None:
        for block in blocks:
            block.ref_cnt += 1
        if not self.track_null_ref_cnt:
            self.null_block.ref_cnt = 0

    def evict_blocks(self, block_ids: set[int]) -> None:
        """Remove the given blocks from the prefix cache; ref counts and the queue are untouched.

        Raises:
            ValueError: for a block id outside ``[0, num_gpu_blocks)``.
        """
        for block_id in block_ids:
            if not 0 <= block_id < len(self.blocks):
                raise ValueError(f"block id {block_id} out of range [0, {len(self.blocks)})")
            block = self.blocks[block_id]
            if self._maybe_evict_cached_block(block) and block.ref_cnt == 0 and not block.is_null:
                self.num_cached_free_blocks -= 1

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; refuses (returns False, changes nothing) while blocks are held."""
        num_used_blocks = self.num_gpu_blocks - self.get_num_free_blocks()
        if num_used_blocks != 1:
            logger.warning(
                "Failed to reset prefix cache because some blocks (%d) are not freed yet",
                num_used_blocks - 1,
            )
            return False
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        self.num_cached_free_blocks = 0
        for block in self.blocks:
            block.reset_hash()
        return True

    def get_num_free_blocks(self) -> int:
        """Free blocks, including evictable cached ones."""
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """Fraction of usable (non-null) blocks currently held, in [0, 1]."""
        total = self.num_gpu_blocks - 1
        if total <= 0:
            return 0.0
        return 1.0 - self.get_num_free_blocks() / total

    def check_invariants(self) -> None:
        """Raise AssertionError if the queue, ref counts or the prefix cache are inconsistent
        (allocator/pool_invariants.py)."""
        check_pool(self)
