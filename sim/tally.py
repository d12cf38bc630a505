"""The paged manager's memory snapshot, kept as running totals instead of recomputed per step.

``PagedKVCacheManager.memory_snapshot`` walks every held request (and, without a pool counter,
every block), far too slow to call after each of ~10^5 steps. For the fast path, where no
block is shared by forked sequences and there is no sliding window or swap, each running
sequence s with c computed tokens, h held slots (blocks x block_size) and final length F
contributes exactly (as ``allocator/paged_snapshot.py`` classifies its tail blocks)::

    unwritten_s = h - c          reserved_s = min(F, h) - c          (c <= F, c <= h)

so with A_h = sum h, A_r = sum min(F, h) and A_c = sum c the snapshot is
    token_states = held blocks x bs - (A_h - A_c),  reserved = A_r - A_c,
    internal_frag = (A_h - A_c) - reserved,  cached = cached_free x bs,  free = the rest.
Held and free block counts come from the pool (O(1)). ``cached_free`` (free blocks still in the
prefix cache) is followed call by call: before an allocation the scheduler counts the hashed
blocks it will take (hits pulled out of the free queue, then the queue's front blocks); before
a free, the hashed blocks whose ref_cnt will reach 0. ``--debug`` checks every step against
``memory_snapshot()``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.sequence import Seq


class PagedTally:
    """Running totals behind the fast snapshot (see the module docstring)."""

    def __init__(self, manager: Any, block_size: int) -> None:
        self.manager = manager
        self.pool = manager.block_pool
        self.tables = manager.single_type_manager.req_to_blocks
        self.block_size = block_size
        self.usable = self.pool.num_gpu_blocks - 1
        self.held_slots = 0
        self.ceiling = 0
        self.cached_free = 0

    def hashed_ahead(self, num_new: int, hits: list[Any] | None) -> int:
        """Cached free blocks an allocation of ``num_new`` blocks after ``hits`` will take."""
        taken = 0
        skip: set[int] = set()
        if hits:
            for block in hits:
                if block.ref_cnt == 0 and not block.is_null:
                    taken += 1
                    skip.add(block.block_id)
        queue = self.pool.free_block_queue
        block = queue.fake_free_list_head.next_free_block
        tail = queue.fake_free_list_tail
        while num_new > 0 and block is not tail:
            if block.block_id not in skip:
                num_new -= 1
                if block.block_hash is not None:
                    taken += 1
            block = block.next_free_block
        return taken

    def hashed_freed(self, request_id: str) -> int:
        """Hashed blocks of the request that its free will return to the free queue."""
        return sum(1 for b in self.tables.get(request_id, ())
                   if b.ref_cnt == 1 and b.block_hash is not None and not b.is_null)

    def set_held(self, seq: Seq, held: int) -> None:
        """The sequence now holds ``held`` slots (0 when freed)."""
        final = seq.num_prompt + seq.group.output_len - 1
        old = seq.held
        self.held_slots += held - old
        self.ceiling += min(final, held) - min(final, old)
        seq.held = held

    def snapshot(self, computed: int) -> tuple[int, int, int, int, int, int, int]:
        """(token_states, reserved, internal_frag, cached, external, free, logical) slots.

        Args:
            computed: A_c, the computed tokens of every sequence holding blocks.
        """
        bs = self.block_size
        num_free = self.pool.get_num_free_blocks()
        unwritten = self.held_slots - computed
        reserved = self.ceiling - computed
        token_states = (self.usable - num_free) * bs - unwritten
        return (token_states, reserved, unwritten - reserved, self.cached_free * bs, 0,
                (num_free - self.cached_free) * bs, computed)
