"""Unit tests for ContiguousManager, the contiguous-preallocation KVManager."""
from __future__ import annotations

import pytest

from allocator.contiguous import EMPTY_BLOCKS, ContiguousBlocks, ContiguousManager
from allocator.interface import KVManager, ManagerConfig, NoFreeBlocksError
from allocator.request import Request


def make_request(
    rid: str, prompt_len: int, final_output_len: int | None, max_tokens: int = 4096
) -> Request:
    return Request(rid, range(prompt_len), max_tokens, final_output_len=final_output_len)


def run_to(manager: ContiguousManager, request: Request, num_tokens: int) -> None:
    """Prefill, then decode one token per call until ``num_tokens`` KV slots are written."""
    assert manager.allocate_slots(request, request.num_tokens) is not None
    request.num_computed_tokens = request.num_tokens
    while request.num_computed_tokens < num_tokens:
        request.append_output_token_ids(7)
        assert manager.allocate_slots(request, 1) is not None
        request.num_computed_tokens += 1
    manager.check_invariants()


def test_from_config_uses_the_paged_capacity() -> None:
    """Capacity is (N - 1) x block_size and placement comes from the config."""
    config = ManagerConfig(num_gpu_blocks=11, block_size=16, placement="first-fit")
    manager = ContiguousManager.from_config(config, policy="pow2")
    assert isinstance(manager, KVManager)
    assert manager.memory_snapshot().capacity == 160 == manager.memory_snapshot().free
    assert manager.placement == "first-fit" and manager.policy_name == "pow2"


def test_no_prefix_hits_copies_or_swaps() -> None:
    """Prefix hits, copy plans and swaps get the neutral answers."""
    manager = ContiguousManager(64, 32)
    request = make_request("a", 4, 2)
    assert manager.get_computed_blocks(request) == (EMPTY_BLOCKS, 0)
    manager.allocate_slots(request, 4)
    assert manager.take_copy_plan() == []
    assert manager.swap_out(request) == [] and manager.swap_in(request) == []
    assert not manager.can_swap_in(request)
    assert manager.get_block_ids("a") == ([0, 32],)


def test_first_allocation_places_the_whole_reservation() -> None:
    """Max places max_model_len slots at once; later decode calls place nothing."""
    manager = ContiguousManager(128, 64)
    request = make_request("a", 10, 5)
    result = manager.allocate_slots(request, 10)
    assert result == ContiguousBlocks(manager.arena.allocated_regions()[0])
    assert result is not None and result.get_block_ids() == ([0, 64],)
    request.num_computed_tokens = 10
    request.append_output_token_ids(1)
    assert manager.allocate_slots(request, 1) is EMPTY_BLOCKS
    assert EMPTY_BLOCKS.get_block_ids() == ([],) and EMPTY_BLOCKS.get_block_ids(True) is None
    assert manager.memory_snapshot().free == 64


def test_fig3_max_reservation_internal_fragmentation() -> None:
    """Fig. 3: reserving 2048 and ending with 10 tokens leaves 2038 internal fragmentation."""
    manager = ContiguousManager(4096, 2048, policy="max")
    request = make_request("a", 4, 7)
    run_to(manager, request, 10)
    snapshot = manager.memory_snapshot()
    assert (snapshot.token_states, snapshot.reserved, snapshot.internal_frag) == (10, 0, 2038)
    assert snapshot.free == 2048 and snapshot.logical_slots == 10


def test_reserved_counts_slots_written_later() -> None:
    """Midway, Max with 10 final slots and 4 written: 6 reserved, 2038 internal."""
    manager = ContiguousManager(4096, 2048)
    request = make_request("a", 4, 7)
    run_to(manager, request, 4)
    snapshot = manager.memory_snapshot()
    assert (snapshot.token_states, snapshot.reserved, snapshot.internal_frag) == (4, 6, 2038)


def test_oracle_leaves_one_slot_for_the_unwritten_last_token() -> None:
    """Oracle reserves prompt + output, one more than the P + O - 1 slots ever written."""
    manager = ContiguousManager(64, 64, policy="oracle", placement="first-fit")
    request = make_request("a", 5, 6)
    run_to(manager, request, 10)
    assert manager.get_block_ids("a") == ([0, 11],)
    assert manager.memory_snapshot().internal_frag == 1


def test_none_when_no_region_fits_despite_enough_free_space() -> None:
    """Two 4-slot holes do not hold a 5-slot reservation; the call changes nothing."""
    manager = ContiguousManager(12, 64, policy="oracle", placement="first-fit")
    requests = [make_request(f"r{i}", 3, 1) for i in range(3)]
    for request in requests:
        manager.allocate_slots(request, 3)
    manager.free(requests[0])
    manager.free(requests[2])
    before = manager.memory_snapshot()
    assert before.free == 4 and before.external_frag == 4
    assert manager.allocate_slots(make_request("big", 4, 1), 4) is None
    assert manager.memory_snapshot() == before
    manager.check_invariants()


def test_exceeding_the_reservation_returns_none_then_readmission_reserves_more() -> None:
    """Pow2 with output 2 reserves prompt + 2; a third output token fails until re-admitted."""
    manager = ContiguousManager(64, 64, policy="pow2", placement="first-fit")
    request = make_request("a", 4, 2)
    run_to(manager, request, 6)
    request.append_output_token_ids(9)
    before = manager.memory_snapshot()
    assert manager.allocate_slots(request, 1) is None
    assert manager.memory_snapshot() == before
    manager.free(request)
    request.num_computed_tokens = 0
    assert manager.allocate_slots(request, request.num_tokens) is not None
    assert manager.get_block_ids("a") == ([0, 7],)


def test_lookahead_counts_against_the_reservation() -> None:
    """Lookahead slots must fit the reservation; Max caps the need at max_model_len."""
    oracle = ContiguousManager(64, 32, policy="oracle", placement="first-fit")
    request = make_request("a", 4, 4)
    assert oracle.allocate_slots(request, 4, num_lookahead_tokens=10) is not None
    assert oracle.get_block_ids("a") == ([0, 14],)
    maximum = ContiguousManager(64, 32)
    other = make_request("b", 4, 4)
    assert maximum.allocate_slots(other, 4, num_lookahead_tokens=100) is not None
    assert maximum.get_block_ids("b") == ([0, 32],)


def test_free_releases_and_ignores_unknown_requests() -> None:
    """free returns the region to the arena; a second free is a no-op."""
    manager = ContiguousManager(64, 32)
    request = make_request("a", 4, 4)
    manager.allocate_slots(request, 4)
    manager.free(request)
    manager.free(request)
    assert manager.get_block_ids("a") == ([],)
    assert manager.memory_snapshot().free == 64
    manager.check_invariants()


def test_fork_gives_the_child_its_own_region() -> None:
    """The child gets a separate region holding a copy of the parent's written slots."""
    manager = ContiguousManager(64, 16, policy="max")
    parent, child = make_request("p", 6, 3), make_request("c", 6, 5)
    run_to(manager, parent, 6)
    assert manager.can_fork(parent, child)
    manager.fork(parent, child)
    assert manager.get_block_ids("c") == ([16, 32],)
    assert manager.num_fork_copied_slots == 6
    assert manager.take_copy_plan() == []
    snapshot = manager.memory_snapshot()
    assert snapshot.token_states == 12 == snapshot.logical_slots
    manager.check_invariants()


def test_fork_without_space_raises_and_bad_forks_are_rejected() -> None:
    """fork raises NoFreeBlocksError when can_fork is False, ValueError on misuse."""
    manager = ContiguousManager(32, 16)
    parent, child = make_request("p", 4, 3), make_request("c", 4, 3)
    manager.allocate_slots(parent, 4)
    manager.allocate_slots(make_request("x", 4, 3), 4)
    assert not manager.can_fork(parent, child)
    with pytest.raises(NoFreeBlocksError):
        manager.fork(parent, child)
    with pytest.raises(ValueError, match="parent"):
        manager.fork(child, parent)
    with pytest.raises(ValueError, match="child"):
        manager.fork(parent, parent)


def test_zero_new_tokens_raise_and_impossible_requests_are_reported() -> None:
    """num_new_tokens == 0 raises like vLLM; can_ever_allocate spots a too-large reservation."""
    manager = ContiguousManager(48, 64)
    request = make_request("a", 4, 3)
    with pytest.raises(ValueError):
        manager.allocate_slots(request, 0)
    assert not manager.can_ever_allocate(request)
    assert ContiguousManager(48, 32).can_ever_allocate(request)


def test_check_invariants_catches_drifted_totals() -> None:
    """A corrupted running total is caught by the full recomputation."""
    manager = ContiguousManager(64, 32)
    manager.allocate_slots(make_request("a", 4, 3), 4)
    manager.check_invariants()
    manager._reserved += 1
    with pytest.raises(AssertionError, match="running totals"):
        manager.check_invariants()
