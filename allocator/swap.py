"""Swap space for the paged manager: a CPU block pool and the rules for moving requests to it.

vLLM v1 preempts only by recompute; v0 could also swap a sequence group's blocks to a CPU
pool (spec section 9.4). pagedsim's rules, re-expressed for the v1 manager:

- ``swap_out(request)`` copies each GPU block of the request to a CPU block and frees the GPU
  blocks (last block first, as ``free`` does). A GPU block whose ref_cnt reaches 0 also leaves
  the GPU prefix cache: its copy now lives on the CPU. Blocks still held by others stay cached.
- Sequences of one fork group share blocks; a block they share is copied once when the group
  is swapped out by consecutive ``swap_out`` calls (the simulator preempts a whole group at
  once): within such a run no GPU block is allocated or written, so a GPU block already
  copied holds the same KV for every holder, and the later swap-out reuses the earlier
  one's CPU block (CPU ref count + 1). Likewise consecutive ``swap_in`` calls bring a
  shared CPU block back into one GPU block. Any other manager call ends the run.
- ``swap_in(request)`` takes fresh GPU blocks from the front of the free queue, one per
  distinct CPU block. Full blocks that come back are hashed into the prefix cache again.
  CPU blocks are freed when no request holds them.
- CPU ids run from 0; the CPU free list is FIFO. Null blocks (sliding window) stay null.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from allocator.block import KVCacheBlock
from allocator.hashing import group_id_suffix
from allocator.interface import CopyPlan, NoFreeBlocksError
from allocator.request import Request

if TYPE_CHECKING:
    from allocator.kv_cache_manager import KVCacheManager

NULL = -1
"""CPU-table entry standing for the null block."""


class SwapSpace:
    """CPU blocks and the CPU block tables of swapped-out requests.

    Invariants: a CPU block's ref count equals the number of CPU tables holding it; a CPU
    block is in the free list iff its ref count is 0.
    """

    def __init__(self, manager: KVCacheManager, num_cpu_blocks: int) -> None:
        if num_cpu_blocks < 0:
            raise ValueError(f"num_cpu_blocks must be >= 0, got {num_cpu_blocks}")
        self.manager = manager
        self.num_cpu_blocks = num_cpu_blocks
        self.free_cpu_blocks: deque[int] = deque(range(num_cpu_blocks))
        self.cpu_ref_cnt = [0] * num_cpu_blocks
        self.cpu_tables: dict[str, list[int]] = {}
        # Within a run of swap_out calls: GPU block id -> its CPU copy.
        self._copies: dict[int, int] = {}
        # Within a run of swap_in calls: CPU block -> the GPU block it came back into.
        self._returned: dict[int, KVCacheBlock] = {}
        self.last_op: str | None = None

    def end_run(self) -> None:
        """Forget the links of the last run of swaps (the manager did something else)."""
        self.last_op = None

    def can_swap_out(self, request: Request) -> bool:
        """Whether the CPU pool can take the request's blocks now."""
        if self.last_op != "out":
            self._copies.clear()
        return len(self._plan_out(request)[1]) <= len(self.free_cpu_blocks)

    def swap_out(self, request: Request) -> CopyPlan:
        """Move the request to the CPU; returns ``(gpu_block, cpu_block)`` copies to execute.

        Raises:
            NoFreeBlocksError: the CPU pool is too small (check :meth:`can_swap_out`).
            ValueError: the request holds no GPU blocks.
        """
        manager = self.manager.single_type_manager
        request_id = request.request_id
        blocks = manager.req_to_blocks.get(request_id)
        if not blocks:
            raise ValueError(f"swap_out: request {request_id!r} holds no GPU blocks")
        if self.last_op != "out":
            self._copies.clear()
            self.last_op = "out"
        keys, new_keys = self._plan_out(request)
        if len(new_keys) > len(self.free_cpu_blocks):
            raise NoFreeBlocksError(
                f"swap_out: {request_id!r} needs {len(new_keys)} CPU blocks, "
                f"{len(self.free_cpu_blocks)} free"
            )
        plan: CopyPlan = []
        for key in new_keys:
            cpu = self.free_cpu_blocks.popleft()
            self._copies[key] = cpu
            plan.append((key, cpu))
        table = [NULL if key is None else self._copies[key] for key in keys]
        for cpu in table:
            if cpu != NULL:
                self.cpu_ref_cnt[cpu] += 1
        self.cpu_tables[request_id] = table
        manager.free(request_id)
        self._evict_freed(blocks)
        return plan

    def can_swap_in(self, request: Request) -> bool:
        """Whether the GPU pool has a block for each CPU block not already back."""
        table = self.cpu_tables.get(request.request_id)
        if table is None:
            return False
        if self.last_op != "in":
            return len({cpu for cpu in table if cpu != NULL}) <= (
                self.manager.block_pool.get_num_free_blocks()
            )
        return len(self._new_for_swap_in(table)) <= self.manager.block_pool.get_num_free_blocks()

    def swap_in(self, request: Request) -> CopyPlan:
        """Bring the request back to the GPU; returns ``(cpu_block, gpu_block)`` copies.

        Raises:
            ValueError: the request is not swapped out.
            NoFreeBlocksError: too few free GPU blocks (check :meth:`can_swap_in`).
        """
        request_id = request.request_id
        table = self.cpu_tables.get(request_id)
        if table is None:
            raise ValueError(f"swap_in: request {request_id!r} is not swapped out")
        if self.last_op != "in":
            self._returned.clear()
            self.last_op = "in"
        new_cpu = self._new_for_swap_in(table)
        pool = self.manager.block_pool
        if len(new_cpu) > pool.get_num_free_blocks():
            raise NoFreeBlocksError(f"swap_in: {request_id!r} needs {len(new_cpu)} GPU blocks")
        plan: CopyPlan = []
        fresh = set(new_cpu)
        for cpu, gpu in zip(new_cpu, pool.get_new_blocks(len(new_cpu))):
            self._returned[cpu] = gpu
            plan.append((cpu, gpu.block_id))
        blocks = []
        for cpu in table:
            if cpu == NULL:
                blocks.append(pool.null_block)
                continue
            gpu = self._returned[cpu]
            if cpu not in fresh:
                gpu.ref_cnt += 1
            blocks.append(gpu)
        self._install(request, blocks)
        del self.cpu_tables[request_id]
        self._release_cpu(table)
        return plan

    def free(self, request_id: str) -> None:
        """Drop a swapped-out request's CPU blocks (a no-op if it has none)."""
        table = self.cpu_tables.pop(request_id, None)
        if table is not None:
            self._release_cpu(table)

    def check_invariants(self) -> None:
        """Raise AssertionError if CPU ref counts and the free list disagree with the tables."""
        holders = [0] * self.num_cpu_blocks
        for table in self.cpu_tables.values():
            for cpu in table:
                if cpu != NULL:
                    holders[cpu] += 1
        if holders != self.cpu_ref_cnt:
            raise AssertionError("CPU block ref counts differ from the CPU tables")
        free = set(self.free_cpu_blocks)
        if len(free) != len(self.free_cpu_blocks):
            raise AssertionError("a CPU block is twice in the free list")
        for cpu, count in enumerate(self.cpu_ref_cnt):
            if (count == 0) != (cpu in free):
                raise AssertionError(f"CPU block {cpu}: ref {count}, free={cpu in free}")

    def _plan_out(self, request: Request) -> tuple[list[int | None], list[int]]:
        """Per table position the GPU block id (None for null), and those not yet on the CPU."""
        blocks = self.manager.single_type_manager.req_to_blocks.get(request.request_id, [])
        keys: list[int | None] = []
        new_keys: list[int] = []
        seen = set(self._copies)
        for block in blocks:
            if block.is_null:
                keys.append(None)
                continue
            key = block.block_id
            keys.append(key)
            if key not in seen:
                seen.add(key)
                new_keys.append(key)
        return keys, new_keys

    def _new_for_swap_in(self, table: list[int]) -> list[int]:
        """Distinct CPU blocks of ``table`` that no sibling has brought back yet, in order."""
        new: list[int] = []
        seen = set(self._returned)
        for cpu in table:
            if cpu != NULL and cpu not in seen:
                seen.add(cpu)
                new.append(cpu)
        return new

    def _install(self, request: Request, blocks: list[KVCacheBlock]) -> None:
        """Make ``blocks`` the request's table and re-cache its full blocks."""
        manager = self.manager.single_type_manager
        request_id = request.request_id
        manager.req_to_blocks[request_id] = blocks
        num_full = request.num_computed_tokens // self.manager.block_size
        if not self.manager.enable_caching:
            return
        pool = self.manager.block_pool
        suffix = group_id_suffix(manager.kv_cache_group_id)
        for index in range(min(num_full, len(request.block_hashes))):
            block = blocks[index]
            if block.is_null or block.block_hash is not None:
                continue
            key = request.block_hashes[index] + suffix
            block.block_hash = key
            pool.cached_block_hash_to_block.insert(key, block)
        manager.num_cached_block[request_id] = num_full

    def _evict_freed(self, blocks: list[KVCacheBlock]) -> None:
        """Drop blocks the swap-out freed (ref_cnt 0) from the GPU prefix cache."""
        pool = self.manager.block_pool
        for block in blocks:
            if block.is_null or block.ref_cnt > 0:
                continue
            if block.block_hash is not None:
                pool.evict_blocks({block.block_id})

    def _release_cpu(self, table: list[int]) -> None:
        for cpu in table:
            if cpu == NULL:
                continue
            self.cpu_ref_cnt[cpu] -= 1
            if self.cpu_ref_cnt[cpu] == 0:
                self.free_cpu_blocks.append(cpu)
