"""Contiguous preallocation (the paper's Orca and FasterTransformer baselines) as a KVManager.

Each request gets one region of adjacent slots holding its whole reservation (Max, Pow2 or
Oracle, ``allocator/reservation.py``), placed by a buddy or first-fit arena with the same
number of usable slots as the paged pool. A request that does not fit waits, even when enough
total space is free. Nothing is shared: each sample and beam has its own region. The
simulator calls this manager exactly as it calls the paged one (``allocator/interface.py``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from allocator.arena import Region, SlotArena
from allocator.interface import CopyPlan, ManagerConfig, MemorySnapshot, NoFreeBlocksError
from allocator.placement import make_arena
from allocator.reservation import ReservationPolicy, get_policy
from allocator.waste import final_kv_slots, split_free, split_held

if TYPE_CHECKING:
    from allocator.request import Request


@dataclass(frozen=True, slots=True)
class ContiguousBlocks:
    """What ``allocate_slots`` and ``get_computed_blocks`` return: the region newly placed.

    ``region`` is None when nothing was placed (a call inside an existing reservation, or the
    neutral "no prefix hit"). Like vLLM's ``KVCacheBlocks`` it holds only what is new.
    """

    region: Region | None = None

    def get_block_ids(self, allow_none: bool = False) -> tuple[list[int], ...] | None:
        """``([start, end],)`` for a new region, else ``([],)`` (None with ``allow_none``)."""
        if self.region is None:
            return None if allow_none else ([],)
        return ([self.region.start, self.region.end],)


EMPTY_BLOCKS = ContiguousBlocks()


@dataclass(slots=True)
class _Holding:
    """One request's region and where its slots are (``split``: token, reserved, internal)."""

    region: Region
    reservation: int
    will_write: int
    written: int
    split: tuple[int, int, int]


class ContiguousManager:
    """One linear arena; one region per live request, placed on its first allocation.

    Rules:
        * ``allocate_slots`` on a request without a region computes the reservation,
          ``max(policy(request), slots needed now)`` capped at ``max_model_len``, and places
          it whole, or returns None (nothing changes) when no single region fits.
        * Later calls succeed in O(1) without placement while the request's need
          (computed + new + lookahead, as vLLM counts it) stays within its reservation.
          Beyond it (Pow2/Oracle only, e.g. lookahead slots or an output longer than the
          trace said) the call returns None so that the scheduler preempts the request;
          re-admission then reserves at least what it needs. Max can never exceed.
        * ``free`` releases the region. ``fork`` gives the child its own region with the
          child's reservation and copies the parent's written slots into it (counted in
          ``num_fork_copied_slots``; the copy plan stays empty because block ids do not
          describe slot ranges). Check ``can_fork`` first: ``fork`` raises
          ``NoFreeBlocksError`` when no region fits.
        * No prefix cache, no swap: ``get_computed_blocks`` is ``(EMPTY_BLOCKS, 0)``,
          ``swap_out``/``swap_in`` return ``[]`` and move nothing (the request keeps its
          region; preempt by ``free`` instead), ``can_swap_in`` is False.
        * ``get_block_ids(id)`` is ``([start, end],)``, the held slot range (``range(*ids[0])``
          enumerates it), or ``([],)`` for a request without a region.

    Invariants: regions are exactly the arena's allocated regions; ``written <= reservation
    <= region size``; the running category totals equal a recomputation from the holdings.
    """

    def __init__(
        self,
        capacity: int,
        max_model_len: int,
        block_size: int = 16,
        policy: str = "max",
        placement: str = "buddy",
    ) -> None:
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.policy_name = policy
        self.policy: ReservationPolicy = get_policy(policy)
        self.placement = placement
        self.arena: SlotArena = make_arena(placement, capacity)
        self.capacity = capacity
        self.num_fork_copied_slots = 0
        self._holdings: dict[str, _Holding] = {}
        self._token_states = 0
        self._reserved = 0
        self._internal_frag = 0

    @classmethod
    def from_config(cls, config: ManagerConfig, policy: str = "max") -> ContiguousManager:
        """Arena of ``config.capacity_slots`` slots, placement from ``config.placement``."""
        return cls(
            config.capacity_slots, config.max_model_len, config.block_size, policy,
            config.placement,
        )

    def reservation_for(self, request: Request, num_slots_needed: int = 1) -> int:
        """Slots the request reserves when placed while needing ``num_slots_needed`` now."""
        policy_slots = min(self.policy(request, self.max_model_len), self.max_model_len)
        return max(policy_slots, num_slots_needed, 1)

    def can_ever_allocate(self, request: Request) -> bool:
        """Whether the request's reservation would fit the empty arena."""
        size = self.arena.region_size(self.reservation_for(request))
        return size <= self.arena.max_region_size()

    def get_computed_blocks(self, request: Request) -> tuple[ContiguousBlocks, int]:
        """No prefix cache in a contiguous arena: never a hit."""
        return EMPTY_BLOCKS, 0

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: object = None,
        num_lookahead_tokens: int = 0,
    ) -> ContiguousBlocks | None:
        """Place the reservation on the first call, then check the request stays inside it.

        Slots are counted as in vLLM::

            | < computed > | < new_computed > | < new > | < lookahead > |
            |<----------- written after this step ------>|
            |<----------------------- need ------------------------->| <= reservation

        Returns:
            ``ContiguousBlocks(region)`` when a region was placed, ``EMPTY_BLOCKS`` when the
            request already had one, None (nothing changed) when it cannot be served.

        Raises:
            ValueError: ``num_new_tokens == 0`` (as vLLM).
        """
        if num_new_tokens <= 0:
            raise ValueError(f"num_new_tokens must be > 0, got {num_new_tokens}")
        limit = self.max_model_len
        computed = min(request.num_computed_tokens + num_new_computed_tokens, limit)
        need = min(computed + num_new_tokens + num_lookahead_tokens, limit)
        written = min(computed + num_new_tokens, request.num_tokens, need)
        holding = self._holdings.get(request.request_id)
        if holding is None:
            return self._place(request, need, written)
        if need > holding.reservation:
            return None
        self._set_written(holding, written)
        return EMPTY_BLOCKS

    def free(self, request: Request) -> None:
        """Release the request's region; a request without one is ignored (as vLLM)."""
        holding = self._holdings.pop(request.request_id, None)
        if holding is None:
            return
        self._add_split(holding.split, -1)
        self.arena.free(holding.region)

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        """``([start, end],)`` of the held slot range, or ``([],)`` without a region."""
        holding = self._holdings.get(request_id)
        if holding is None:
            return ([],)
        return ([holding.region.start, holding.region.end],)

    def can_fork(self, parent_request: Request, child_request: Request) -> bool:
        """Whether ``fork`` would find a region for the child now."""
        parent = self._fork_parent(parent_request, child_request)
        reservation = self.reservation_for(child_request, parent.written)
        return self.arena.can_allocate(reservation)

    def fork(self, parent_request: Request, child_request: Request) -> None:
        """Give the child its own region holding a copy of the parent's written slots.

        Like the paged fork, the child inherits the parent's ``num_computed_tokens``.

        Raises:
            NoFreeBlocksError: no region fits the child's reservation (see ``can_fork``).
            ValueError: the parent has no region or the child already has one.
        """
        parent = self._fork_parent(parent_request, child_request)
        reservation = self.reservation_for(child_request, parent.written)
        if not self.arena.can_allocate(reservation):
            raise NoFreeBlocksError(
                f"fork: no region of {reservation} slots for {child_request.request_id!r}"
            )
        self._hold(child_request, reservation, parent.written)
        self.num_fork_copied_slots += parent.written
        child_request.num_computed_tokens = parent_request.num_computed_tokens

    def take_copy_plan(self) -> CopyPlan:
        """Always empty: fork copies are slot ranges, counted in ``num_fork_copied_slots``."""
        return []

    def swap_out(self, request: Request) -> CopyPlan:
        """No CPU pool: moves nothing, the request keeps its region."""
        return []

    def swap_in(self, request: Request) -> CopyPlan:
        """No CPU pool: moves nothing."""
        return []

    def can_swap_in(self, request: Request) -> bool:
        """Never: nothing is ever swapped out."""
        return False

    def memory_snapshot(self) -> MemorySnapshot:
        """The six categories from running totals (O(1) plus the largest-free-run query).

        ``logical_slots`` equals ``token_states`` (nothing is shared) and ``null_slots`` is 0
        (the arena has no null block; its capacity is the paged pool's usable slots).
        """
        cached, external, free = split_free(
            self.arena.num_free_slots(), 0, self.arena.largest_free_region()
        )
        return MemorySnapshot(
            capacity=self.capacity,
            token_states=self._token_states,
            reserved=self._reserved,
            internal_frag=self._internal_frag,
            cached_evictable=cached,
            external_frag=external,
            free=free,
            logical_slots=self._token_states,
        )

    def check_invariants(self) -> None:
        """Recompute everything from the holdings and the arena's regions (slow)."""
        self.arena.check_invariants()
        regions = sorted(h.region for h in self._holdings.values())
        assert regions == self.arena.allocated_regions(), "holdings and arena disagree"
        totals = [0, 0, 0]
        for request_id, h in self._holdings.items():
            assert 0 <= h.written <= h.reservation, f"{request_id}: wrote past its reservation"
            assert h.region.size == self.arena.region_size(h.reservation), f"{request_id}"
            split = split_held(h.region.size, h.written, h.will_write)
            assert split == h.split, f"{request_id}: stale split {h.split} != {split}"
            totals = [t + s for t, s in zip(totals, split)]
        running = [self._token_states, self._reserved, self._internal_frag]
        assert totals == running, f"running totals {running} != recomputed {totals}"
        gaps = [b.start - a.end for a, b in itertools.pairwise([Region(0, 0), *regions])]
        gaps.append(self.capacity - (regions[-1].end if regions else 0))
        snapshot = self.memory_snapshot()
        assert snapshot.free == max(gaps), f"largest free run {snapshot.free} != {max(gaps)}"
        assert snapshot.free + snapshot.external_frag == sum(gaps), "free space drifted"

    def _fork_parent(self, parent_request: Request, child_request: Request) -> _Holding:
        parent = self._holdings.get(parent_request.request_id)
        if parent is None:
            raise ValueError(f"fork: parent {parent_request.request_id!r} holds no region")
        if child_request.request_id in self._holdings:
            raise ValueError(f"fork: child {child_request.request_id!r} already holds a region")
        return parent

    def _place(self, request: Request, need: int, written: int) -> ContiguousBlocks | None:
        reservation = self.reservation_for(request, need)
        if not self.arena.can_allocate(reservation):
            return None
        return ContiguousBlocks(self._hold(request, reservation, written).region)

    def _hold(self, request: Request, reservation: int, written: int) -> _Holding:
        region = self.arena.allocate(reservation)
        will_write = min(final_kv_slots(request, self.max_model_len), reservation)
        split = split_held(region.size, written, will_write)
        holding = _Holding(region, reservation, will_write, written, split)
        self._holdings[request.request_id] = holding
        self._add_split(split, 1)
        return holding

    def _set_written(self, holding: _Holding, written: int) -> None:
        # The hot path of split_held, inlined (will_write <= reservation <= region size);
        # check_invariants recomputes every split with split_held itself.
        if written == holding.written:
            return
        reserved = holding.will_write - written if holding.will_write > written else 0
        internal = holding.region.size - written - reserved
        old = holding.split
        self._token_states += written - old[0]
        self._reserved += reserved - old[1]
        self._internal_frag += internal - old[2]
        holding.written = written
        holding.split = (written, reserved, internal)

    def _add_split(self, split: tuple[int, int, int], sign: int) -> None:
        self._token_states += sign * split[0]
        self._reserved += sign * split[1]
        self._internal_frag += sign * split[2]
