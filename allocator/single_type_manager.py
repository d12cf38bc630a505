"""Per-attention-type block bookkeeping (vLLM v0.14 ``single_type_kv_cache_manager.py``).

A single-type manager owns the block table of every request for one KV-cache group
(``req_to_blocks``) and knows how its attention type uses blocks: full attention (here) keeps
every block until the request is freed; sliding window (``sliding_window_manager.py``) replaces
blocks that fell out of the window with the null block and frees them early. Prefix-cache
lookups are classmethods so a coordinator can run them before a request has any state here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Sequence

from allocator.block import KVCacheBlock
from allocator.block_pool import BlockPool
from allocator.hashing import BlockHash, group_id_suffix
from allocator.kv_cache_spec import KVCacheSpec
from allocator.profiles import DEFAULT_PROFILE, VllmProfile
from allocator.request import Request


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(a // -b)


class SingleTypeKVCacheManager(ABC):
    """Block tables of one KV-cache group.

    Invariants: ``num_cached_block[r] <= len(req_to_blocks[r])`` counts the leading blocks of
    request r already hashed (presence in the dict marks a running request with no new prefix
    hits); every non-null block's ``ref_cnt`` equals the number of requests holding it.
    Subclasses add attention-specific skipping and cache-hit search; fork / copy-on-write can
    be layered on ``req_to_blocks`` and :meth:`BlockPool.touch` without touching this core.
    ``skips_tokens``: :meth:`get_num_skipped_tokens` can be non-zero (blocks freed early);
    ``masks_blocks``: :meth:`block_mask` leaves some full blocks unhashed (0.23+ windows).
    """

    skips_tokens = False
    masks_blocks = False

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
        self.profile = profile
        # Profile switch C6: clamp external tokens on any skipped token (0.24+).
        self._clamp_any_skip = profile.ext_clamp == "any_token"
        # The sliding-window admission cap (0.20+): None for full attention.
        self.max_admission_blocks_per_request = max_admission_blocks_per_request
        self._cap_every_check = profile.swa_admission_cap == "every_check"
        self.block_size = kv_cache_spec.block_size
        self.kv_cache_spec = kv_cache_spec
        self.block_pool = block_pool
        self.enable_caching = enable_caching
        self.kv_cache_group_id = kv_cache_group_id
        self.eagle_drop = False  # EAGLE's last-block drop is on (KVCacheManager sets it)
        self.req_to_blocks: defaultdict[str, list[KVCacheBlock]] = defaultdict(list)
        self.num_cached_block: dict[str, int] = {}
        self._null_block = block_pool.null_block

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int,
        apply_admission_cap: bool = False,
    ) -> int:
        """Blocks the free pool must supply to hold ``num_tokens`` tokens for the request.

        Counts fresh blocks plus prefix hits that sit in the free queue (touching them takes
        them out of it); hits inside the skipped (out-of-window) prefix are not counted. The
        required count is capped at ``max_admission_blocks_per_request`` in the full-sequence
        check (``apply_admission_cap``), or in every check under the 0.20 profile.
        """
        num_required_blocks = cdiv(num_tokens, self.block_size)
        cap = self.max_admission_blocks_per_request
        if cap is not None and (apply_admission_cap or self._cap_every_check):
            num_required_blocks = min(num_required_blocks, cap)
        num_req_blocks = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:
            if new_computed_blocks:
                raise ValueError(f"request {request_id!r} is running but got new prefix hits")
            return max(num_required_blocks - num_req_blocks, 0)
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_local_computed_blocks = len(new_computed_blocks) + num_req_blocks
        num_new_blocks = max(
            num_required_blocks - max(num_skipped_blocks, num_local_computed_blocks), 0
        )
        num_skip_from_hits = max(0, num_skipped_blocks - num_req_blocks)
        num_evictable_blocks = sum(
            1
            for block in new_computed_blocks[num_skip_from_hits:]
            if block.ref_cnt == 0 and not block.is_null
        )
        return num_new_blocks + num_evictable_blocks

    def allocate_new_computed_blocks(
        self,
        request_id: str,
        new_computed_blocks: Sequence[KVCacheBlock],
        num_local_computed_tokens: int,
        num_external_computed_tokens: int,
    ) -> None:
        """Give a new request its prefix hits (touched) and blocks for external tokens.

        Hits inside the skipped prefix are replaced by null blocks. External tokens inside the
        skipped prefix are clamped away when a whole block is skipped (0.14) or, under
        ``ext_clamp="any_token"`` (0.24+), when any token is; then a sub-block skip can leave
        none, and the block is allocated with the new tokens instead. A running request
        (already in ``num_cached_block``) must have no hits, and nothing happens.
        """
        if request_id in self.num_cached_block:
            if new_computed_blocks:
                raise ValueError(f"request {request_id!r} is running but got new prefix hits")
            return
        req_blocks = self.req_to_blocks[request_id]
        if req_blocks:
            raise ValueError(f"request {request_id!r} already holds {len(req_blocks)} blocks")
        num_total_computed_tokens = num_local_computed_tokens + num_external_computed_tokens
        num_skipped_tokens = self.get_num_skipped_tokens(num_total_computed_tokens)
        num_skipped_blocks = num_skipped_tokens // self.block_size
        if num_skipped_blocks > 0:
            new_computed_blocks = new_computed_blocks[num_skipped_blocks:]
        if num_skipped_blocks > 0 or (self._clamp_any_skip and num_skipped_tokens > 0):
            num_external_computed_tokens = min(
                num_total_computed_tokens - num_skipped_tokens, num_external_computed_tokens
            )
        if self.enable_caching:
            self.block_pool.touch(new_computed_blocks)
        elif new_computed_blocks:
            raise ValueError("prefix hits given while prefix caching is disabled")
        req_blocks.extend([self._null_block] * num_skipped_blocks)
        req_blocks.extend(new_computed_blocks)
        self.num_cached_block[request_id] = len(req_blocks)
        if num_external_computed_tokens > 0:
            num_blocks = cdiv(num_total_computed_tokens, self.block_size) - len(req_blocks)
            req_blocks.extend(self.block_pool.get_new_blocks(max(0, num_blocks)))

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """Append fresh blocks until the request can hold ``num_tokens``; return the new ones."""
        req_blocks = self.req_to_blocks[request_id]
        num_new_blocks = cdiv(num_tokens, self.block_size) - len(req_blocks)
        if num_new_blocks <= 0:
            return []
        new_blocks = self.block_pool.get_new_blocks(num_new_blocks)
        req_blocks.extend(new_blocks)
        return new_blocks

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Hash and index the request's blocks full within ``num_tokens`` that have a hash."""
        request_id = request.request_id
        num_cached_blocks = self.num_cached_block.get(request_id, 0)
        num_hashed_tokens = len(request.block_hashes) * self.block_pool.hash_block_size
        num_full_blocks = min(num_tokens, num_hashed_tokens) // self.block_size  # 0.33 lookahead
        if num_cached_blocks >= num_full_blocks:
            return
        mask = (self.block_mask(request, num_cached_blocks, num_full_blocks)
                if self.masks_blocks else None)
        self.block_pool.cache_full_blocks(request, self.req_to_blocks[request_id],
                                          num_cached_blocks, num_full_blocks, self.block_size,
                                          self.kv_cache_group_id, mask)
        self.num_cached_block[request_id] = num_full_blocks

    def block_mask(self, request: Request, start_block: int, end_block: int) -> list[bool] | None:
        """Which blocks of ``[start_block, end_block)`` to hash (None: all of them)."""
        return None

    def free(self, request_id: str) -> None:
        """Release the request's blocks, last block first (a no-op if it holds none)."""
        req_blocks = self.req_to_blocks.pop(request_id, [])
        # Reversed so that the chain's tail is evicted before its shared root.
        self._release(req_blocks[::-1])
        self.num_cached_block.pop(request_id, None)

    def _release(self, ordered_blocks: list[KVCacheBlock]) -> None:
        """Hand blocks back to the pool, first-to-evict first."""
        self.block_pool.free_blocks(ordered_blocks)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens that attention no longer reads once ``num_computed_tokens`` are done."""
        return 0

    def remove_skipped_blocks(self, request_id: str, total_computed_tokens: int) -> None:
        """Replace blocks holding only skipped tokens with the null block and free them."""
        num_skipped_tokens = self.get_num_skipped_tokens(total_computed_tokens)
        if num_skipped_tokens <= 0:
            return
        blocks = self.req_to_blocks[request_id]
        num_skipped_blocks = min(num_skipped_tokens // self.block_size, len(blocks))
        removed_blocks = []
        for i in range(num_skipped_blocks - 1, -1, -1):
            if blocks[i] is self._null_block:
                break
            removed_blocks.append(blocks[i])
            blocks[i] = self._null_block
        self._release(removed_blocks)

    @abstractmethod
    def get_num_common_prefix_blocks(self, running_request_id: str) -> int:
        """Leading blocks shared by every request of this group (for cascade attention)."""

    @classmethod
    @abstractmethod
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
        """Longest cached prefix of at most ``max_length`` tokens: one block list per group."""

    def check_invariants(self) -> None:
        """Raise AssertionError unless ref counts match the holders in ``req_to_blocks``.

        Assumes this manager is the pool's only user (one KV-cache group).
        """
        holders = [0] * len(self.block_pool.blocks)
        for request_id, blocks in self.req_to_blocks.items():
            num_cached = self.num_cached_block.get(request_id, 0)
            if num_cached > len(blocks):
                raise AssertionError(f"request {request_id!r}: num_cached_block > its blocks")
            for block in blocks:
                if not block.is_null:
                    holders[block.block_id] += 1
        for block in self.block_pool.blocks[1:]:
            if block.ref_cnt != holders[block.block_id]:
                raise AssertionError(
                    f"block {block.block_id}: ref_cnt {block.ref_cnt} but "
                    f"{holders[block.block_id]} holders"
                )
        self.block_pool.check_invariants()


class FullAttentionManager(SingleTypeKVCacheManager):
    """Full attention: hits are searched left to right and stop at the first miss."""

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
        block_size = kv_cache_spec.block_size
        alignment = block_size if alignment_tokens is None else alignment_tokens
        computed_blocks: tuple[list[KVCacheBlock], ...] = tuple([] for _ in kv_cache_group_ids)
        max_num_blocks = max_length // block_size
        if len(kv_cache_group_ids) == 1:
            # One group: the same lookups as get_cached_block, without per-hash lists.
            get_one_block = block_pool.cached_block_hash_to_block.get_one_block
            suffix = group_id_suffix(kv_cache_group_ids[0])
            computed_group = computed_blocks[0]
            for block_hash in block_hashes[:max_num_blocks]:
                block = get_one_block(block_hash + suffix)
                if block is None:
                    break
                computed_group.append(block)
        else:
            for block_hash in block_hashes[:max_num_blocks]:
                cached_blocks = block_pool.get_cached_block(block_hash, kv_cache_group_ids)
                if cached_blocks is None:
                    break
                for computed, cached in zip(computed_blocks, cached_blocks):
                    computed.append(cached)
        if use_eagle and computed_blocks[0]:
            for computed in computed_blocks:
                computed.pop()
        while block_size != alignment and len(computed_blocks[0]) * block_size % alignment != 0:
            for computed in computed_blocks:
                computed.pop()
        return computed_blocks

    def get_num_common_prefix_blocks(self, running_request_id: str) -> int:
        num_requests = len(self.req_to_blocks)
        num_common_blocks = 0
        for block in self.req_to_blocks.get(running_request_id, ()):
            if block.ref_cnt != num_requests:
                break
            num_common_blocks += 1
        return num_common_blocks
