"""What the fast path needs from each kind of manager: when a call is due, and the memory
snapshot kept as running totals instead of recomputed per step.

Paged (``PagedTally``): ``PagedKVCacheManager.memory_snapshot`` walks every held request,
far too slow after each of ~10^5 steps. Without shared blocks, sliding window or swap, each
running sequence s with c computed tokens, h held slots (blocks x block_size) and final
length F contributes exactly (as ``allocator/paged_snapshot.py`` classifies its tail)::

    unwritten_s = h - c          reserved_s = min(F, h) - c          (c <= F, c <= h)

so with A_h = sum h, A_r = sum min(F, h) and A_c = sum c the snapshot is
    token_states = held blocks x bs - (A_h - A_c),  reserved = A_r - A_c,
    internal_frag = (A_h - A_c) - reserved,  cached = cached_free x bs,  free = the rest,
with the held, free and cached-free block counts from the pool (O(1)). A one-token call
that needs no new block and fills no block changes nothing and is skipped.

Contiguous (``ContiguousTally``): a running request's calls stay inside its reservation and
only move its written count (``written = computed`` after each step), so a steady
sequence's calls are deferred; when it wakes, its last call is replayed and the manager is
exactly where the reference loop left it (under async the request then holds one token
fewer, its newest output being a placeholder, as the reference call saw it). Until then the snapshot is the manager's (O(1))
plus what the steady sequences wrote since they slept: ``d = sum (c_now - c_sleep)`` more
token states and logical slots, ``d`` fewer reserved slots (``c <= final length``).
``--debug`` checks every step of both against ``memory_snapshot()``.
"""
from __future__ import annotations

import sys
from typing import Any

from allocator.interface import MemorySnapshot
from sim.workload.sequence import Seq

Snapshot = tuple[int, int, int, int, int, int, int]
"""(token_states, reserved, internal_frag, cached_evictable, external_frag, free,
logical_slots): a step row's memory columns."""


def snapshot_row(snap: MemorySnapshot) -> Snapshot:
    """A manager's ``MemorySnapshot`` as a step row's memory columns."""
    return (snap.token_states, snap.reserved, snap.internal_frag, snap.cached_evictable,
            snap.external_frag, snap.free, snap.logical_slots)


class PagedTally:
    """The paged manager's part of the fast path (see the module docstring)."""

    skips_calls = True

    def __init__(self, manager: Any, block_size: int, max_model_len: int) -> None:
        self.pool = manager.block_pool
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.caching = manager.enable_caching
        self.usable = self.pool.num_gpu_blocks - 1
        self.held_slots = 0
        self.ceiling = 0
        # A steady sequence's one-token call is vLLM's allocate_slots without the paged
        # manager's additions, which are idle here: no forks (so no copy-on-write),
        # recompute preemption (no swap run to end), registered when admitted.
        self.append_slots = manager.append_slots

    def allocated(self, seq: Seq, num_tokens: int) -> None:
        """The slots the sequence holds and its next call after ``allocate_slots`` gave it
        ``num_tokens`` more: ``call_at = min(held slots, next block end - 1)`` (the reference
        path's calls and the steady ones alike)."""
        # Comparisons rather than min() and max(): this runs at every block boundary.
        bs = self.block_size
        end = seq.req.num_computed_tokens + num_tokens
        if end > self.max_model_len:  # noqa: PLR1730
            end = self.max_model_len
        held = -(-end // bs) * bs
        if held > seq.held:
            self.set_held(seq, held)
        else:
            held = seq.held
        fill_at = (end // bs + 1) * bs - 1
        seq.call_at = fill_at if self.caching and fill_at < held else held

    def freed(self, seq: Seq) -> None:
        self.set_held(seq, 0)
        seq.call_at = -1

    def set_held(self, seq: Seq, held: int) -> None:
        """The sequence now holds ``held`` slots (0 when freed)."""
        final = seq.last_c + 1
        old = seq.held
        self.held_slots += held - old
        # Comparisons rather than min(): this runs at every new block.
        self.ceiling += (held if held < final else final) - (  # noqa: FURB136
            old if old < final else final)  # noqa: FURB136
        seq.held = held

    def slept(self, seq: Seq, computed: int) -> None:
        """Nothing to defer: a skipped call changes nothing."""

    def sync(self, seq: Seq, computed: int) -> None:
        """Nothing deferred to replay."""

    def woken(self, seq: Seq, computed: int) -> None:
        """Nothing deferred to replay."""

    def can_take(self, num_new_blocks: int) -> bool:
        """Whether calls needing ``num_new_blocks`` new blocks are sure to succeed."""
        return num_new_blocks <= self.pool.free_block_queue.num_free_blocks

    def snapshot(self, active: int, steady: int) -> Snapshot:
        """The step row's memory columns, ``active`` and ``steady`` summing A_c."""
        bs = self.block_size
        pool = self.pool
        computed = active + steady
        num_free = pool.free_block_queue.num_free_blocks
        cached_free = pool.num_cached_free_blocks
        unwritten = self.held_slots - computed
        reserved = self.ceiling - computed
        token_states = (self.usable - num_free) * bs - unwritten
        return (token_states, reserved, unwritten - reserved, cached_free * bs, 0,
                (num_free - cached_free) * bs, computed)


class ContiguousTally:
    """A contiguous manager's part of the fast path (see the module docstring).

    Invariant: ``behind`` sums ``synced`` (the computed count the manager last saw) over the
    steady sequences.
    """

    skips_calls = False

    def __init__(self, manager: Any, lag: int = 0) -> None:
        self.manager = manager
        self.lag = lag
        """The steady sequences' outputs in flight (``SteadySet.lag``)."""
        self.behind = 0

    def allocated(self, seq: Seq, num_tokens: int) -> None:
        """No call is ever due for a steady sequence: its reservation holds it to the end."""
        seq.call_at = sys.maxsize

    def freed(self, seq: Seq) -> None:
        seq.call_at = -1

    def append_slots(self, request: Any, num_new_tokens: int) -> Any:
        raise AssertionError("a contiguous manager's steady sequences make no calls")

    def slept(self, seq: Seq, computed: int) -> None:
        """The sequence's calls are deferred from now on; the manager saw ``computed``."""
        seq.synced = computed
        self.behind += computed

    def sync(self, seq: Seq, computed: int) -> None:
        """Replay the sequence's last deferred call (the reference loop's call of the step
        before, at ``computed - 1``, when the request held ``computed - lag`` tokens), so the
        manager is where that call left it."""
        if computed > seq.synced:
            req = seq.req
            req.advance_to(computed - self.lag)
            req.num_computed_tokens = computed - 1
            if self.manager.allocate_slots(req, 1) is None:
                raise AssertionError(f"{seq.request_id}: a replayed call failed")
            req.num_computed_tokens = computed
            self.behind += computed - seq.synced
            seq.synced = computed

    def woken(self, seq: Seq, computed: int) -> None:
        """The sequence is active again: its calls are made as they come."""
        self.sync(seq, computed)
        self.behind -= computed

    def can_take(self, num_new_blocks: int) -> bool:
        return num_new_blocks == 0

    def snapshot(self, active: int, steady: int) -> Snapshot:
        snap = self.manager.memory_snapshot()
        ahead = steady - self.behind
        return (snap.token_states + ahead, snap.reserved - ahead, snap.internal_frag,
                snap.cached_evictable, snap.external_frag, snap.free,
                snap.logical_slots + ahead)
