"""Slot allocation of the KV-cache manager: the staged ``allocate_slots`` and its shortcut.

``SlotAllocation`` is the half of :class:`allocator.kv_cache_manager.KVCacheManager` that
allocates: ``_allocate_slots_staged`` runs vLLM's ``allocate_slots`` stage by stage, and
``append_slots`` is the shortcut for a running request's decode step (same result);
``can_fit_full_sequence`` is 0.19-0.20's admission gate. The attributes it reads are set by
``KVCacheManager.__init__``.
"""

from __future__ import annotations

from collections.abc import Sequence

from allocator.admission import check_new_tokens, full_sequence_fits, watermark_for
from allocator.block import KVCacheBlock
from allocator.block_pool import BlockPool
from allocator.kv_cache_blocks import KVCacheBlocks
from allocator.request import Request
from allocator.single_type_manager import SingleTypeKVCacheManager


class SlotAllocation:
    """Allocating slots for a request's next tokens (see the module docstring)."""

    block_size: int
    max_model_len: int
    enable_caching: bool
    block_pool: BlockPool
    single_type_manager: SingleTypeKVCacheManager
    watermark_blocks: int
    empty_kv_cache_blocks: KVCacheBlocks
    _adopt_zero_tokens: bool
    _in_flight_free: bool
    _req_to_blocks: dict[str, list[KVCacheBlock]]
    _num_cached_block: dict[str, int]

    def append_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_lookahead_tokens: int = 0,
        delay_cache_blocks: bool = False,
    ) -> KVCacheBlocks | None:
        """:meth:`allocate_slots` for a running request: no prefix hits, no external tokens.

        Every decode step of a running full-attention request comes here (vLLM v0 called
        this ``append_slots``). For a request that already holds blocks, in a group that
        frees no blocks early and under no watermark, vLLM's stages reduce to "top up to cdiv(need, block_size)
        blocks, then cache the newly full ones"; otherwise the staged form runs. The result
        is exactly :meth:`allocate_slots`'s, which callers may bypass with this when they
        know there are no hits.
        """
        request_id = request.request_id
        req_blocks = self._req_to_blocks.get(request_id)
        if req_blocks is None or num_new_tokens <= 0:
            return self._allocate_slots_staged(
                request, num_new_tokens, 0, None, num_lookahead_tokens, 0, delay_cache_blocks
            )
        # Comparisons instead of min(): on CPython 3.11 a two-argument min() costs ~5x a
        # comparison, and this runs once per token-step.
        max_model_len = self.max_model_len
        total_computed = request.num_computed_tokens
        if total_computed > max_model_len:  # noqa: PLR1730
            total_computed = max_model_len
        num_tokens_need_slot = total_computed + num_new_tokens + num_lookahead_tokens
        if num_tokens_need_slot > max_model_len:  # noqa: PLR1730
            num_tokens_need_slot = max_model_len
        block_size = self.block_size
        num_new_blocks = -(num_tokens_need_slot // -block_size) - len(req_blocks)
        new_blocks = None
        if num_new_blocks > 0:
            block_pool = self.block_pool
            if num_new_blocks > block_pool.free_block_queue.num_free_blocks:
                return None
            new_blocks = block_pool.get_new_blocks(num_new_blocks)
            req_blocks.extend(new_blocks)
        if self.enable_caching and not delay_cache_blocks:
            # Cheap test first: capping at request.num_tokens can only lower the count.
            num_tokens_to_cache = total_computed + num_new_tokens
            if num_tokens_to_cache // block_size > self._num_cached_block.get(request_id, 0):
                num_tokens = request.num_tokens
                if num_tokens_to_cache > num_tokens:  # noqa: PLR1730
                    num_tokens_to_cache = num_tokens
                self.single_type_manager.cache_blocks(request, num_tokens_to_cache)
        return self.empty_kv_cache_blocks if new_blocks is None else KVCacheBlocks((new_blocks,))

    def _allocate_slots_staged(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int,
        new_computed_blocks: KVCacheBlocks | None,
        num_lookahead_tokens: int,
        num_external_computed_tokens: int,
        delay_cache_blocks: bool,
        full_sequence_must_fit: bool = False,
        reserved_blocks: int = 0,
        has_scheduled_reqs: bool = True,
    ) -> KVCacheBlocks | None:
        """:meth:`allocate_slots` stage by stage, as vLLM writes it (see its docstring)."""
        if num_new_tokens <= 0:
            check_new_tokens(request, num_new_tokens, num_new_computed_tokens,
                             num_external_computed_tokens, self._adopt_zero_tokens)
        empty = self.empty_kv_cache_blocks.blocks
        hit_lists = new_computed_blocks.blocks if new_computed_blocks is not None else empty
        hit_blocks = hit_lists[0]
        manager = self.single_type_manager
        request_id = request.request_id
        num_local_computed_tokens = request.num_computed_tokens + num_new_computed_tokens
        total_computed_tokens = min(
            num_local_computed_tokens + num_external_computed_tokens, self.max_model_len
        )
        num_tokens_need_slot = min(
            total_computed_tokens + num_new_tokens + num_lookahead_tokens, self.max_model_len
        )
        reserve = (watermark_for(self.watermark_blocks, request, has_scheduled_reqs)
                   if self.watermark_blocks else 0)
        if full_sequence_must_fit and not full_sequence_fits(
            manager, self.block_pool, self.max_model_len, request, hit_blocks,
            total_computed_tokens, reserve,
        ):
            return None
        processed_tokens = total_computed_tokens
        if self._in_flight_free and request.num_in_flight_tokens:
            processed_tokens = max(0, processed_tokens - request.num_in_flight_tokens)
        manager.remove_skipped_blocks(request_id, processed_tokens)
        num_blocks_to_allocate = manager.get_num_blocks_to_allocate(
            request_id,
            num_tokens_need_slot,
            hit_blocks,
            num_local_computed_tokens + num_external_computed_tokens,
        )
        free = self.block_pool.get_num_free_blocks() - reserved_blocks
        if num_blocks_to_allocate + reserve > free:
            return None
        if hit_lists is not empty or num_external_computed_tokens > 0:
            manager.allocate_new_computed_blocks(
                request_id, hit_blocks, num_local_computed_tokens, num_external_computed_tokens
            )
        new_blocks = manager.allocate_new_blocks(request_id, num_tokens_need_slot)
        if self.enable_caching and not delay_cache_blocks:
            num_tokens_to_cache = min(total_computed_tokens + num_new_tokens, request.num_tokens)
            manager.cache_blocks(request, num_tokens_to_cache)
        return self.create_kv_cache_blocks((new_blocks,))

    def create_kv_cache_blocks(self, blocks: tuple[Sequence[KVCacheBlock], ...]) -> KVCacheBlocks:
        """Wrap per-group lists, reusing the shared empty result when every list is empty."""
        return KVCacheBlocks(blocks) if any(blocks) else self.empty_kv_cache_blocks

    def can_fit_full_sequence(
        self,
        request: Request,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: KVCacheBlocks | None = None,
        num_external_computed_tokens: int = 0,
        num_encoder_tokens: int = 0,
    ) -> bool:
        """vLLM 0.19-0.20's admission gate: does the request's whole sequence fit now?

        Counts the blocks for ``min(num_tokens, max_model_len)`` tokens given the hits (those
        in the free queue count, as in :meth:`allocate_slots`); changes nothing.
        """
        hit_blocks = new_computed_blocks.blocks[0] if new_computed_blocks is not None else ()
        total_computed_tokens = min(
            request.num_computed_tokens + num_new_computed_tokens + num_external_computed_tokens,
            self.max_model_len,
        )
        return full_sequence_fits(self.single_type_manager, self.block_pool, self.max_model_len,
                                  request, hit_blocks, total_computed_tokens, 0)
