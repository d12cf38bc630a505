"""Sliding-window attention's block manager (vLLM ``SlidingWindowManager``), one group.

Tokens before ``num_computed - sliding_window + 1`` are never read again, so their blocks are
replaced by the null block and freed early. A prefix hit needs the last
``cdiv(sliding_window - 1, bs)`` blocks before its end, so from vLLM 0.23 only blocks that can
end such a run are hashed (:func:`reachable_block_mask`, the profile's ``swa_cache_mask``).
"""

from __future__ import annotations

from collections.abc import Sequence

from allocator.block import KVCacheBlock
from allocator.block_pool import BlockPool
from allocator.hashing import BlockHash
from allocator.kv_cache_spec import FullAttentionSpec, KVCacheSpec, SlidingWindowSpec
from allocator.profiles import DEFAULT_PROFILE, VllmProfile
from allocator.request import Request
from allocator.single_type_manager import FullAttentionManager, SingleTypeKVCacheManager, cdiv


def reachable_block_mask(
    start_block: int,
    end_block: int,
    block_size: int,
    sliding_window: int,
    retention_interval: int | None,
    num_prompt_tokens: int,
    use_eagle: bool = False,
) -> list[bool] | None:
    """The 0.23+ caching mask of blocks ``[start_block, end_block)``; None caches every block.

    A hit at a block boundary needs the ``need = cdiv(sliding_window - 1, bs)`` blocks before
    it; with EAGLE's last-block drop (``use_eagle``) one block more, the run shifted one block
    right so that it ends on the block the drop removes (vLLM 0.23-0.33). ``retention_interval`` None keeps a tail at every boundary: all blocks when
    ``need >= 1``, none for a window of 1. 0 keeps only the tail before the replay boundary
    (the last block boundary at or before ``num_prompt_tokens - 1``); k > 0 also keeps the
    last ``need`` blocks of every k-token segment::

        retention 0, need 2:  [ . . . . M M | . . ]   M: masked in, |: replay boundary
    """
    need = cdiv(sliding_window - 1, block_size) + use_eagle
    shift = int(use_eagle)
    mask = [False] * (end_block - start_block)
    if retention_interval != 0:
        segment = block_size if retention_interval is None else retention_interval
        per_segment = segment // block_size
        if need >= per_segment:
            return None
        for i in range(max(start_block, shift), end_block):
            if (i - shift) % per_segment >= per_segment - need:
                mask[i - start_block] = True
    if retention_interval is not None:
        end = (num_prompt_tokens - 1) // block_size + shift
        for j in range(max(start_block, end - need), min(end_block, end)):
            mask[j - start_block] = True
    return mask


class SlidingWindowManager(SingleTypeKVCacheManager):
    """Sliding window: tokens before ``num_computed - sliding_window + 1`` are never read again."""

    skips_tokens = True

    def __init__(
        self,
        kv_cache_spec: KVCacheSpec,
        block_pool: BlockPool,
        enable_caching: bool,
        kv_cache_group_id: int,
        *,
        profile: VllmProfile = DEFAULT_PROFILE,
        max_admission_blocks_per_request: int | None = None,
    ) -> None:
        if not isinstance(kv_cache_spec, SlidingWindowSpec):
            raise TypeError(f"SlidingWindowManager needs a SlidingWindowSpec, got {kv_cache_spec}")
        super().__init__(
            kv_cache_spec,
            block_pool,
            enable_caching,
            kv_cache_group_id,
            profile=profile,
            max_admission_blocks_per_request=max_admission_blocks_per_request,
        )
        self.sliding_window = kv_cache_spec.sliding_window
        # Profile switches C1 ("swa_split", 0.23) and C5 (the caching mask, 0.23+).
        self._split_free = profile.free_order == "swa_split"
        self.masks_blocks = profile.swa_cache_mask == "mask"
        self.retention_interval = profile.prefix_cache_retention_interval
        if self.retention_interval and self.retention_interval % self.block_size:
            raise ValueError(
                f"prefix_cache_retention_interval ({self.retention_interval}) must be a "
                f"multiple of the block size ({self.block_size})"
            )

    def block_mask(self, request: Request, start_block: int, end_block: int) -> list[bool] | None:
        """Which blocks of ``[start_block, end_block)`` to hash (None: all of them)."""
        return reachable_block_mask(
            start_block,
            end_block,
            self.block_size,
            self.sliding_window,
            self.retention_interval,
            request.num_prompt_tokens,
            self.eagle_drop,
        )

    def _release(self, ordered_blocks: list[KVCacheBlock]) -> None:
        if not self._split_free:
            self.block_pool.free_blocks(ordered_blocks)
            return
        # 0.23: hashed blocks to the tail, then unhashed ones to the front, both in order.
        self.block_pool.free_blocks([b for b in ordered_blocks if b.block_hash is not None])
        self.block_pool.free_blocks(
            [b for b in ordered_blocks if b.block_hash is None], prepend=True
        )

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        kv_cache_group_ids: Sequence[int],
        block_pool: BlockPool,
        kv_cache_spec: KVCacheSpec,
        use_eagle: bool = False,
        alignment_tokens: int | None = None,
    ) -> tuple[list[KVCacheBlock], ...]:
        """Longest prefix whose last ``cdiv(sliding_window - 1, bs)`` blocks are all cached.

        Searched right to left; earlier positions are null blocks. Without such a run, only a
        cached run starting at block 0 counts.
        """
        if not isinstance(kv_cache_spec, SlidingWindowSpec):
            raise TypeError(f"expected a SlidingWindowSpec, got {kv_cache_spec}")
        block_size = kv_cache_spec.block_size
        alignment = block_size if alignment_tokens is None else alignment_tokens
        num_contiguous_needed = cdiv(kv_cache_spec.sliding_window - 1, block_size) + use_eagle
        max_num_blocks = max_length // block_size
        null_block = block_pool.null_block
        computed_blocks = tuple([null_block] * max_num_blocks for _ in kv_cache_group_ids)
        num_contiguous = 0
        match_found = False
        for i in range(max_num_blocks - 1, -1, -1):
            cached_blocks = block_pool.get_cached_block(block_hashes[i], kv_cache_group_ids)
            if cached_blocks is None:
                num_contiguous = 0
                continue
            if num_contiguous == 0 and (i + 1) * block_size % alignment != 0:
                continue
            for computed, cached in zip(computed_blocks, cached_blocks):
                computed[i] = cached
            num_contiguous += 1
            if num_contiguous >= num_contiguous_needed:
                for computed in computed_blocks:
                    del computed[i + num_contiguous :]
                match_found = True
                break
        if not match_found:
            for computed in computed_blocks:
                del computed[num_contiguous:]
            while len(computed_blocks[0]) * block_size % alignment != 0:
                for computed in computed_blocks:
                    computed.pop()
        if use_eagle and computed_blocks[0]:
            for computed in computed_blocks:
                computed.pop()
        return computed_blocks

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - self.sliding_window + 1)

    def get_num_common_prefix_blocks(self, running_request_id: str) -> int:
        return 0


spec_manager_map: dict[type, type[SingleTypeKVCacheManager]] = {
    FullAttentionSpec: FullAttentionManager,
    SlidingWindowSpec: SlidingWindowManager,
}


def get_manager_for_kv_cache_spec(
    kv_cache_spec: KVCacheSpec,
    block_pool: BlockPool,
    enable_caching: bool,
    kv_cache_group_id: int,
    *,
    profile: VllmProfile = DEFAULT_PROFILE,
    max_admission_blocks_per_request: int | None = None,
) -> SingleTypeKVCacheManager:
    """Build the manager class that handles ``kv_cache_spec``'s attention type."""
    manager_class = spec_manager_map[type(kv_cache_spec)]
    return manager_class(
        kv_cache_spec,
        block_pool,
        enable_caching,
        kv_cache_group_id,
        profile=profile,
        max_admission_blocks_per_request=max_admission_blocks_per_request,
    )
