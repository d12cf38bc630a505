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
Held, free and cached-free block counts come from the pool (O(1): ``num_free_blocks`` and
``num_cached_free_blocks``, the counter ``PagedKVCacheManager.memory_snapshot`` reads too).
``--debug`` checks every step against ``memory_snapshot()``.

Every step row's snapshot is a tuple in ``STEP_COLUMNS`` order; ``snapshot_row`` turns a
manager's ``MemorySnapshot`` into it, the form the reference loop records.
"""
from __future__ import annotations

from typing import Any

from allocator.interface import MemorySnapshot
from sim.workload.sequence import Seq


def snapshot_row(snap: MemorySnapshot) -> tuple[int, int, int, int, int, int, int]:
    """(token_states, reserved, internal_frag, cached, external, free, logical) slots."""
    return (snap.token_states, snap.reserved, snap.internal_frag, snap.cached_evictable,
            snap.external_frag, snap.free, snap.logical_slots)


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

    def set_held(self, seq: Seq, held: int) -> None:
        """The sequence now holds ``held`` slots (0 when freed)."""
        final = seq.last_c + 1
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
        pool = self.pool
        num_free = pool.free_block_queue.num_free_blocks
        cached_free = pool.num_cached_free_blocks
        unwritten = self.held_slots - computed
        reserved = self.ceiling - computed
        token_states = (self.usable - num_free) * bs - unwritten
        return (token_states, reserved, unwritten - reserved, cached_free * bs, 0,
                (num_free - cached_free) * bs, computed)
