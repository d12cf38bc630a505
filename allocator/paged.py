"""The paged manager the simulator runs: vLLM's ``KVCacheManager`` plus fork, COW and swap.

Without ``fork`` and ``swap_*`` every call behaves exactly as vLLM v0.14's manager (same
block ids, hits and free-queue order): the subclass only adds state beside it. The additions
re-express vLLM v0's rules for the v1 manager (spec section 9):

- ``fork(parent, child)``: the child gets the parent's block table; every block's ref_cnt
  goes up by one and nothing is copied.
- copy-on-write inside ``allocate_slots``: a block in the slot range about to be written that
  is shared (ref_cnt > 1) is replaced, for the writer only, by a fresh block from
  ``get_new_blocks``; ``(src, dst)`` joins the copy plan. The last holder writes in place.
  Full blocks are never written again, so they stay shared. The capacity check counts the
  copies first: a call that cannot copy returns None and changes nothing.
- swap: see ``allocator/swap.py``.
"""
from __future__ import annotations

from allocator import hashing
from allocator.block import KVCacheBlock
from allocator.hashing import (
    RequestBlockHasher,
    get_hash_fn_by_name,
    get_request_block_hasher,
    init_none_hash,
)
from allocator.interface import CopyPlan, ManagerConfig, MemorySnapshot
from allocator.kv_cache_blocks import KVCacheBlocks
from allocator.kv_cache_manager import KVCacheManager
from allocator.kv_cache_spec import KVCacheConfig
from allocator.paged_snapshot import paged_memory_snapshot
from allocator.profiles import DEFAULT_PROFILE, VllmProfile
from allocator.request import Request
from allocator.swap import SwapSpace


class PagedKVCacheManager(KVCacheManager):
    """vLLM paging with fork / copy-on-write, swap and the memory-waste snapshot.

    Invariants (beyond ``KVCacheManager``'s): every block's ref_cnt equals the number of
    requests whose table holds it (forked children count); ``requests`` holds exactly the
    requests with a block table here; a swapped-out request holds no GPU block.
    """

    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
        hash_block_size: int | None = None,
        enable_caching: bool = True,
        log_stats: bool = False,
        hash_algo: str = "sha256",
        num_cpu_blocks: int = 0,
        *,
        vllm_profile: VllmProfile = DEFAULT_PROFILE,
        watermark: float = 0.0,
        max_in_flight_tokens: int | None = None,
    ) -> None:
        super().__init__(
            kv_cache_config,
            max_model_len,
            hash_block_size,
            enable_caching,
            log_stats,
            vllm_profile=vllm_profile,
            watermark=watermark,
            max_in_flight_tokens=max_in_flight_tokens,
        )
        self.hash_algo = hash_algo
        self.block_hasher: RequestBlockHasher | None = None
        if enable_caching:
            hash_fn = get_hash_fn_by_name(hash_algo)
            if hashing.NONE_HASH is None:
                init_none_hash(hash_fn, vllm_profile.none_hash_seed)
            self.block_hasher = get_request_block_hasher(
                self.block_size, hash_fn, vllm_profile.extra_keys
            )
        self.requests: dict[str, Request] = {}
        self.copy_plan: CopyPlan = []
        # Without a fork only prefix hits are shared, and those are full blocks that are
        # never written again, so the copy-on-write scan can be skipped until the first fork.
        self.has_forked = False
        self.swap_space = SwapSpace(self, num_cpu_blocks)

    @classmethod
    def from_config(cls, config: ManagerConfig) -> PagedKVCacheManager:
        """Build the manager the simulator asks for by name ("paged" / "paged-nocache")."""
        kv_cache_config = KVCacheConfig(
            num_blocks=config.num_gpu_blocks,
            block_size=config.block_size,
            sliding_window=config.sliding_window,
        )
        return cls(
            kv_cache_config,
            config.max_model_len,
            enable_caching=config.enable_caching,
            log_stats=config.log_stats,
            hash_algo=config.hash_algo,
            num_cpu_blocks=config.num_cpu_blocks,
            vllm_profile=config.vllm_profile,
            watermark=config.watermark,
            max_in_flight_tokens=config.max_in_flight_tokens,
        )

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
        """vLLM's ``allocate_slots``, with copy-on-write of shared blocks about to be written."""
        self.swap_space.end_run()
        if self.has_forked:
            shared = self._shared_blocks_to_write(request, num_new_tokens + num_lookahead_tokens)
            if shared and not self._copy_on_write(request, num_new_tokens, num_lookahead_tokens):
                return None
        blocks = super().allocate_slots(
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
            num_external_computed_tokens,
            delay_cache_blocks,
            num_encoder_tokens,
            full_sequence_must_fit,
            reserved_blocks,
            has_scheduled_reqs,
        )
        if blocks is not None:
            self.requests[request.request_id] = request
        return blocks

    def free(self, request: Request) -> None:
        """Release the request's GPU blocks (last first) and any CPU blocks it holds."""
        self.swap_space.end_run()
        super().free(request)
        self.requests.pop(request.request_id, None)
        self.swap_space.free(request.request_id)

    def can_fork(self, parent_request: Request, child_request: Request) -> bool:
        """Always True while the parent holds blocks: a fork shares, it allocates nothing."""
        return bool(self.single_type_manager.req_to_blocks.get(parent_request.request_id))

    def fork(self, parent_request: Request, child_request: Request) -> None:
        """Give ``child_request`` the parent's blocks (ref_cnt + 1 each); nothing is copied.

        The child must hold no blocks and carry the parent's tokens; it inherits the parent's
        ``num_computed_tokens``, block hashes and cached-block count.

        Raises:
            ValueError: the parent holds no blocks, the child already does, or their tokens
                differ.
        """
        self.swap_space.end_run()
        manager = self.single_type_manager
        parent_id, child_id = parent_request.request_id, child_request.request_id
        parent_blocks = manager.req_to_blocks.get(parent_id)
        if not parent_blocks:
            raise ValueError(f"fork: parent {parent_id!r} holds no blocks")
        if manager.req_to_blocks.get(child_id) or child_id in self.swap_space.cpu_tables:
            raise ValueError(f"fork: child {child_id!r} already holds blocks")
        if child_request.all_token_ids != parent_request.all_token_ids:
            raise ValueError(f"fork: child {child_id!r} has other tokens than {parent_id!r}")
        for block in parent_blocks:
            if not block.is_null:
                block.ref_cnt += 1
        manager.req_to_blocks[child_id] = list(parent_blocks)
        self.has_forked = True
        if parent_id in manager.num_cached_block:
            manager.num_cached_block[child_id] = manager.num_cached_block[parent_id]
        if child_request.block_hashes != parent_request.block_hashes:
            child_request.block_hashes[:] = parent_request.block_hashes
        child_request.num_computed_tokens = parent_request.num_computed_tokens
        self.requests[child_id] = child_request

    def take_copy_plan(self) -> CopyPlan:
        """The ``(src, dst)`` block copies recorded since the last call, in order; then clear."""
        plan, self.copy_plan = self.copy_plan, []
        return plan

    def can_swap_out(self, request: Request) -> bool:
        """Whether the CPU pool can take the request's blocks."""
        return self.swap_space.can_swap_out(request)

    def swap_out(self, request: Request) -> CopyPlan:
        """Move the request's blocks to CPU blocks; returns the ``(gpu, cpu)`` copies to do."""
        plan = self.swap_space.swap_out(request)
        self.requests.pop(request.request_id, None)
        return plan

    def can_swap_in(self, request: Request) -> bool:
        """Whether enough GPU blocks are free to bring the request back."""
        return self.swap_space.can_swap_in(request)

    def swap_in(self, request: Request) -> CopyPlan:
        """Bring a swapped-out request back; returns the ``(cpu, gpu)`` copies to do."""
        plan = self.swap_space.swap_in(request)
        self.requests[request.request_id] = request
        return plan

    def memory_snapshot(self) -> MemorySnapshot:
        """Where every usable slot is now (see ``allocator/waste.py`` for the categories)."""
        return paged_memory_snapshot(self, self.requests)

    def check_invariants(self) -> None:
        """KVCacheManager's checks, plus: tracked requests match block tables; snapshot sums."""
        super().check_invariants()
        tables = self.single_type_manager.req_to_blocks
        held = {rid for rid, blocks in tables.items() if blocks}
        untracked = held - set(self.requests)
        if untracked:
            raise AssertionError(f"requests hold blocks but are not tracked: {sorted(untracked)}")
        for request_id in self.swap_space.cpu_tables:
            if tables.get(request_id):
                raise AssertionError(f"swapped-out request {request_id!r} holds GPU blocks")
        self.swap_space.check_invariants()
        self.memory_snapshot()

    def _shared_blocks_to_write(self, request: Request, num_slots: int) -> list[int]:
        """Indices of shared (ref_cnt > 1) blocks in the slot range about to be written."""
        if not self.has_forked:
            return []
        blocks = self.single_type_manager.req_to_blocks.get(request.request_id)
        if not blocks or num_slots <= 0:
            return []
        first = request.num_computed_tokens // self.block_size
        last = min(len(blocks), -(-(request.num_computed_tokens + num_slots) // self.block_size))
        return [i for i in range(first, last) if blocks[i].ref_cnt > 1 and not blocks[i].is_null]

    def _copy_on_write(
        self, request: Request, num_new_tokens: int, num_lookahead_tokens: int
    ) -> bool:
        """Replace the writer's shared blocks by private copies; False (no change) if short.

        Stage 1 of ``allocate_slots`` (freeing out-of-window blocks) runs first, as vLLM
        does, so the shared blocks are looked up again after it.
        """
        manager = self.single_type_manager
        request_id = request.request_id
        total_computed = min(request.num_computed_tokens, self.max_model_len)
        num_tokens_need_slot = min(
            total_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len
        )
        manager.remove_skipped_blocks(request_id, total_computed)
        shared = self._shared_blocks_to_write(request, num_new_tokens + num_lookahead_tokens)
        num_needed = len(shared) + manager.get_num_blocks_to_allocate(
            request_id, num_tokens_need_slot, [], total_computed
        )
        if num_needed > self.block_pool.get_num_free_blocks():
            return False
        blocks = manager.req_to_blocks[request_id]
        copies: list[KVCacheBlock] = self.block_pool.get_new_blocks(len(shared))
        for index, copy in zip(shared, copies):
            source = blocks[index]
            source.ref_cnt -= 1
            blocks[index] = copy
            self.copy_plan.append((source.block_id, copy.block_id))
        return True
