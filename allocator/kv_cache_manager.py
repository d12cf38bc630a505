"""The scheduler-facing KV-cache manager (vLLM v0.14 ``KVCacheManager``), for one group.

It answers the scheduler's two questions: how much of a new request's prompt is already cached
(``get_computed_blocks``) and whether the pool can hold the tokens about to be computed
(``allocate_slots``, None when it cannot). vLLM's coordinator layer, which fans out to several
KV-cache groups, is folded in here since pagedsim models one group.
"""

from __future__ import annotations

from allocator.admission import (
    admission_cap,
    watermark_blocks,
)
from allocator.block_pool import BlockPool
from allocator.kv_cache_blocks import KVCacheBlocks
from allocator.kv_cache_slots import SlotAllocation
from allocator.kv_cache_spec import KVCacheConfig
from allocator.profiles import DEFAULT_PROFILE, VllmProfile
from allocator.request import Request
from allocator.sliding_window_manager import get_manager_for_kv_cache_spec
from allocator.stats import PrefixCacheStats


class KVCacheManager(SlotAllocation):
    """Block allocation, prefix caching and freeing for the requests of one model.

    Args:
        kv_cache_config: pool size, block size and optional sliding window.
        max_model_len: the longest sequence a request may reach; slot counts are capped by it.
        hash_block_size: block size of ``request.block_hashes``; defaults to the block size and
            must equal it when caching is on (one group, as vLLM's unitary coordinator asserts).
        enable_caching: prefix caching on or off.
        log_stats: keep :class:`PrefixCacheStats` (see :meth:`make_prefix_cache_stats`).

    Invariants: see :meth:`check_invariants`.
    """

    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
        hash_block_size: int | None = None,
        enable_caching: bool = True,
        log_stats: bool = False,
        *,
        vllm_profile: VllmProfile = DEFAULT_PROFILE,
        watermark: float = 0.0,
        max_in_flight_tokens: int | None = None,
    ) -> None:
        kv_cache_spec = kv_cache_config.kv_cache_spec
        self.block_size = kv_cache_spec.block_size
        if hash_block_size is None:
            hash_block_size = self.block_size
        if enable_caching and hash_block_size != self.block_size:
            raise ValueError(
                f"hash_block_size {hash_block_size} must equal block_size {self.block_size} "
                "with one KV-cache group"
            )
        if max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {max_model_len}")
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.log_stats = log_stats
        self.num_kv_cache_groups = 1
        self.vllm_profile = vllm_profile
        self.block_pool = BlockPool(
            kv_cache_config.num_blocks,
            enable_caching,
            hash_block_size,
            free_order=vllm_profile.free_order,
            null_block_ref_cnt=vllm_profile.null_block_ref_cnt,
        )
        self.single_type_manager = get_manager_for_kv_cache_spec(
            kv_cache_spec,
            self.block_pool,
            enable_caching,
            kv_cache_group_id=0,
            profile=vllm_profile,
            max_admission_blocks_per_request=admission_cap(
                kv_cache_config, max_model_len, max_in_flight_tokens, vllm_profile
            ),
        )
        self.watermark_blocks = watermark_blocks(watermark, kv_cache_config)
        self._adopt_zero_tokens = vllm_profile.zero_token_adopt
        self._in_flight_free = vllm_profile.async_in_flight_swa_free
        self._use_eagle, self._hash_lookahead_tokens = False, 0
        self.empty_kv_cache_blocks = KVCacheBlocks(((),))
        # allocate_slots may skip its staged form unless the group frees blocks early or a
        # watermark applies (it depends on the request's status).
        self._fast_path_ok = not self.single_type_manager.skips_tokens and not self.watermark_blocks
        # Shortcuts for the fast path; the manager mutates these dicts, never rebinds them.
        # An empty dict when the fast path is off: its first test then sends every call to
        # the staged path.
        self._req_to_blocks = self.single_type_manager.req_to_blocks if self._fast_path_ok else {}
        self._num_cached_block = self.single_type_manager.num_cached_block
        self.prefix_cache_stats: PrefixCacheStats | None = PrefixCacheStats() if log_stats else None

    @property
    def use_eagle(self) -> bool:
        """EAGLE drafts: a prefix hit drops its last block (its draft KV depends on the token
        after it) unless ``hash_lookahead_tokens``; set by the owner."""
        return self._use_eagle

    @use_eagle.setter
    def use_eagle(self, value: bool) -> None:
        self._use_eagle = value
        self._set_eagle_drop()

    @property
    def hash_lookahead_tokens(self) -> int:
        """The requests' hasher's ``lookahead`` (``profiles.num_hash_lookahead_tokens``): a
        hit's hashes prove the token after it, so EAGLE drops no block (vLLM 0.33)."""
        return self._hash_lookahead_tokens

    @hash_lookahead_tokens.setter
    def hash_lookahead_tokens(self, value: int) -> None:
        self._hash_lookahead_tokens = value
        self._set_eagle_drop()

    def _set_eagle_drop(self) -> None:
        """The group drops a hit's last block for EAGLE unless the hashes look ahead."""
        self.single_type_manager.eagle_drop = self._use_eagle and not self._hash_lookahead_tokens

    @property
    def usage(self) -> float:
        """Fraction of usable blocks held by requests."""
        return self.block_pool.get_usage()

    def make_prefix_cache_stats(self) -> PrefixCacheStats | None:
        """Return the stats gathered so far and start new ones; None when ``log_stats`` is off."""
        if not self.log_stats:
            return None
        stats = self.prefix_cache_stats
        self.prefix_cache_stats = PrefixCacheStats()
        return stats

    def get_computed_blocks(self, request: Request) -> tuple[KVCacheBlocks, int]:
        """The request's longest cached prefix, capped at ``num_tokens - 1`` tokens.

        At least the last token is always recomputed, because the model needs its logits.
        Nothing changes here: the hit blocks are taken by :meth:`allocate_slots`.

        Returns:
            (hit blocks, number of hit tokens), block granular.
        """
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return self.empty_kv_cache_blocks, 0
        max_cache_hit_length = request.num_tokens - 1
        manager = self.single_type_manager
        computed_blocks = manager.find_longest_cache_hit(
            request.block_hashes,
            max_cache_hit_length,
            [0],
            self.block_pool,
            manager.kv_cache_spec,
            manager.eagle_drop,
        )
        num_new_computed_tokens = len(computed_blocks[0]) * self.block_size
        if self.prefix_cache_stats is not None:
            self.prefix_cache_stats.record(
                num_tokens=request.num_tokens,
                num_hits=num_new_computed_tokens,
                preempted=request.num_preemptions > 0,
            )
        return self.create_kv_cache_blocks(computed_blocks), num_new_computed_tokens

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: KVCacheBlocks | None = None,
        num_lookahead_tokens: int = 0,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        num_encoder_tokens: int = 0,
        full_sequence_must_fit: bool = False,
        reserved_blocks: int = 0,
        has_scheduled_reqs: bool = True,
    ) -> KVCacheBlocks | None:
        """Make room for ``num_new_tokens`` more tokens of ``request``; None if the pool is short.

        Token layout of the request after this call (blocks of ``block_size``)::

            |<------------------ num_tokens_need_slot (<= max_model_len) ----------------->|
            |  comp       |  new_comp    |  ext_comp   |  new          |  lookahead        |
            |  owned      |  prefix hits |  KV from a  |  computed     |  speculative      |
            |  already    |  (touched)   |  connector  |  this step    |  slots, not cached|
            |<----------- total_computed_tokens ------>|               |                   |
            |<------------ cached up to min(.., request.num_tokens) -->|                   |
            [ b0 ][ b1 ][ b2 ][ b3 ][ b4 ][ b5 ][ b6 ] ... cdiv(num_tokens_need_slot, bs)

        Stages: (0) with ``full_sequence_must_fit`` (vLLM 0.21+), return None unless the whole
        sequence fits (:meth:`can_fit_full_sequence`, plus the watermark);
        (1) free blocks that fell out of a sliding window, even if the call then fails;
        (2) count the blocks needed, including hits sitting in the free queue, and return None
        with nothing else changed when too few are free; (3) touch the hits and allocate blocks
        for external tokens; (4) allocate fresh blocks from the front of the free queue;
        (5) hash and cache the blocks that became full.

        Args:
            request: the request; ``num_computed_tokens`` must reflect tokens already owned.
            num_new_tokens: tokens to compute now (0 only with external tokens).
            num_new_computed_tokens: prefix-hit tokens from :meth:`get_computed_blocks`.
            new_computed_blocks: the hit blocks from :meth:`get_computed_blocks`.
            num_lookahead_tokens: extra slots for speculative tokens (never cached).
            num_external_computed_tokens: tokens whose KV a connector supplies.
            delay_cache_blocks: skip caching (the KV arrives asynchronously).
            num_encoder_tokens: accepted for signature compatibility; unused (no cross-attention).
            full_sequence_must_fit: the 0.21+ admission gate (reserve-full-ISL).
            reserved_blocks: free blocks the per-chunk check must leave to others.
            has_scheduled_reqs: whether other requests run this step; the watermark applies to
                WAITING or PREEMPTED requests (``request.status``) only then.

        Returns:
            The newly allocated blocks (not the hits), or None if the pool cannot supply them.

        Raises:
            ValueError: if there is nothing to allocate (no new and no external tokens, and,
                under ``zero_token_adopt``, no prefix hit to adopt).
        """
        if (
            new_computed_blocks is None
            and not num_new_computed_tokens
            and not num_external_computed_tokens
            and num_new_tokens > 0
            and not full_sequence_must_fit
            and not reserved_blocks
            and self._fast_path_ok
        ):
            return self.append_slots(
                request, num_new_tokens, num_lookahead_tokens, delay_cache_blocks
            )
        return self._allocate_slots_staged(
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
            num_external_computed_tokens,
            delay_cache_blocks,
            full_sequence_must_fit,
            reserved_blocks,
            has_scheduled_reqs,
        )

    def free(self, request: Request) -> None:
        """Release all of the request's blocks, last block first; cached ones stay findable."""
        self.single_type_manager.free(request.request_id)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Cache the request's full blocks within its first ``num_computed_tokens`` tokens."""
        if self.enable_caching:
            self.single_type_manager.cache_blocks(request, num_computed_tokens)

    def get_num_common_prefix_blocks(self, running_request_id: str) -> list[int]:
        """Per group, the leading blocks held by every request (0 when caching is off, and
        always under the 0.32+ profile's ``cascade_prefix="zeros"``)."""
        if not self.enable_caching or self.vllm_profile.cascade_prefix == "zeros":
            return [0]
        return [self.single_type_manager.get_num_common_prefix_blocks(running_request_id)]

    def evict_blocks(self, block_ids: set[int]) -> None:
        """Drop the given blocks from the prefix cache (see :meth:`BlockPool.evict_blocks`)."""
        self.block_pool.evict_blocks(block_ids)

    def reset_prefix_cache(self) -> bool:
        """Forget the prefix cache; False (nothing changed) while any request holds blocks."""
        if not self.block_pool.reset_prefix_cache():
            return False
        if self.prefix_cache_stats is not None:
            self.prefix_cache_stats.reset = True
        return True

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        """All blocks the request holds, hits included, in block-table order."""
        blocks = self.single_type_manager.req_to_blocks.get(request_id) or []
        return self.create_kv_cache_blocks((blocks,))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        """The request's block ids per group (its block table)."""
        return self.get_blocks(request_id).get_block_ids()

    def check_invariants(self) -> None:
        """Raise AssertionError if pool and block tables disagree.

        Checks: free + held == N - 1; a non-null block is free iff its ref_cnt is 0; every
        cached key points at blocks carrying it; each ref_cnt equals its number of holders.
        """
        self.single_type_manager.check_invariants()
