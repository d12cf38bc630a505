"""Stateful property tests of the contiguous arenas and ContiguousManager beside simple models.

Arena machines allocate and free random sizes against a dict of live regions: regions never
overlap, buddy regions are aligned powers of two, first-fit holes stay coalesced, the largest
free run equals the largest gap of the model, and freeing everything restores the whole arena
(buddy: its original chunks). The manager machine runs requests under every policy and
placement and recomputes each waste category from the model's own arithmetic.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from allocator.arena import Region, SlotArena
from allocator.arena_buddy import BuddyArena, power_of_two_chunks
from allocator.contiguous import ContiguousManager
from allocator.placement import make_arena
from allocator.request import Request
from allocator.reservation import get_policy
from allocator.waste import final_kv_slots

SETTINGS = settings(
    max_examples=20, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def free_gaps(capacity: int, regions: list[Region]) -> list[int]:
    """Sizes of the runs of free slots between the given (non-overlapping) regions."""
    ordered = sorted(regions)
    edges = [Region(0, 0), *ordered, Region(capacity, 0)]
    return [b.start - a.end for a, b in itertools.pairwise(edges) if b.start > a.end]


class ArenaMachine(RuleBasedStateMachine):
    """One arena beside the set of regions it handed out."""

    placement = "buddy"
    regions = Bundle("regions")

    @initialize(capacity=st.integers(0, 200))
    def build(self, capacity: int) -> None:
        self.arena: SlotArena = make_arena(self.placement, capacity)
        self.live: dict[int, Region] = {}

    @rule(target=regions, num_slots=st.integers(1, 70))
    def allocate(self, num_slots: int) -> Region | None:
        if not self.arena.can_allocate(num_slots):
            assert num_slots > self.arena.largest_free_region() or self.placement == "buddy"
            return None
        region = self.arena.allocate(num_slots)
        assert region.size == self.arena.region_size(num_slots) >= num_slots
        if self.placement == "buddy":
            assert region.size & (region.size - 1) == 0 and region.start % region.size == 0
        for other in self.live.values():
            assert region.end <= other.start or other.end <= region.start, "regions overlap"
        self.live[region.start] = region
        return region

    @rule(region=consumes(regions))
    def free(self, region: Region | None) -> None:
        if region is not None:
            self.arena.free(region)
            del self.live[region.start]

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "arena"):
            return
        self.arena.check_invariants()
        gaps = free_gaps(self.arena.capacity, list(self.live.values()))
        assert self.arena.num_free_slots() == sum(gaps)
        assert self.arena.largest_free_region() == max(gaps, default=0)
        assert [r.size for r in self.arena.free_regions()] == gaps, "holes not coalesced"

    def teardown(self) -> None:
        if not hasattr(self, "arena"):
            return
        for region in list(self.live.values()):
            self.arena.free(region)
        self.arena.check_invariants()
        capacity = self.arena.capacity
        assert self.arena.free_regions() == ([Region(0, capacity)] if capacity else [])
        if isinstance(self.arena, BuddyArena):
            assert self.arena.free_blocks() == power_of_two_chunks(capacity)


class ManagerMachine(RuleBasedStateMachine):
    """A ContiguousManager beside a model of each live request's region and progress."""

    policy = "max"
    placement = "buddy"

    def __init__(self) -> None:
        super().__init__()
        self.max_model_len = 40
        self.manager = ContiguousManager(150, self.max_model_len, 4, self.policy, self.placement)
        self.live: dict[str, Request] = {}
        self.next_id = 0

    @rule(prompt_len=st.integers(1, 30), output_len=st.integers(0, 20))
    def admit(self, prompt_len: int, output_len: int) -> None:
        request = Request(f"r{self.next_id}", range(prompt_len), 64, final_output_len=output_len)
        self.next_id += 1
        reservation = get_policy(self.policy)(request, self.max_model_len)
        fits = self.manager.arena.can_allocate(max(reservation, prompt_len))
        result = self.manager.allocate_slots(request, prompt_len)
        assert (result is not None) == fits
        if result is not None:
            request.num_computed_tokens = prompt_len
            request.append_output_token_ids(0)
            self.live[request.request_id] = request

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 1 << 16))
    def decode(self, pick: int) -> None:
        request = self.live[sorted(self.live)[pick % len(self.live)]]
        if self.manager.allocate_slots(request, 1) is None:
            self._free(request)
            return
        request.num_computed_tokens += 1
        request.append_output_token_ids(0)
        if request.num_computed_tokens >= final_kv_slots(request, self.max_model_len):
            self._free(request)

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 1 << 16))
    def abort(self, pick: int) -> None:
        self._free(self.live[sorted(self.live)[pick % len(self.live)]])

    @invariant()
    def categories_match_the_model(self) -> None:
        self.manager.check_invariants()
        regions, token_states, reserved = [], 0, 0
        for request in self.live.values():
            start, end = self.manager.get_block_ids(request.request_id)[0]
            regions.append(Region(start, end - start))
            policy_slots = get_policy(self.policy)(request, self.max_model_len)
            limit = min(max(policy_slots, request.num_prompt_tokens), end - start)
            token_states += request.num_computed_tokens
            reserved += max(0, min(final_kv_slots(request, self.max_model_len), limit)
                            - request.num_computed_tokens)
        held = sum(r.size for r in regions)
        gaps = free_gaps(self.manager.capacity, regions)
        snapshot = self.manager.memory_snapshot()
        assert sum(r.size for r in regions) + sum(gaps) == snapshot.capacity, "regions overlap"
        assert (snapshot.token_states, snapshot.reserved) == (token_states, reserved)
        assert snapshot.internal_frag == held - token_states - reserved
        assert (snapshot.free, snapshot.external_frag) == (max(gaps, default=0),
                                                          sum(gaps) - max(gaps, default=0))

    def teardown(self) -> None:
        for request in list(self.live.values()):
            self._free(request)
        snapshot = self.manager.memory_snapshot()
        assert snapshot.free == snapshot.capacity, "slots leaked"
        self.manager.check_invariants()

    def _free(self, request: Request) -> None:
        self.manager.free(request)
        del self.live[request.request_id]


@pytest.mark.parametrize("placement", ["buddy", "first-fit"])
def test_arena_machine(placement: str) -> None:
    """Random allocate/free streams keep each arena consistent and leak-free."""
    machine: type[ArenaMachine] = type("ArenaMachineFor", (ArenaMachine,), {"placement": placement})
    machine.TestCase.settings = SETTINGS
    machine.TestCase().runTest()


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle"])
@pytest.mark.parametrize("placement", ["buddy", "first-fit"])
def test_manager_machine(policy: str, placement: str) -> None:
    """Random request streams keep every waste category equal to the model's arithmetic."""
    machine: type[ManagerMachine] = type(
        "ManagerMachineFor", (ManagerMachine,), {"policy": policy, "placement": placement}
    )
    machine.TestCase.settings = SETTINGS
    machine.TestCase().runTest()
