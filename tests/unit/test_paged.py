"""Unit tests of the paged manager's additions: fork, copy-on-write, swap and the snapshot."""
from __future__ import annotations

import pytest

from allocator.interface import KVManager, ManagerConfig, NoFreeBlocksError
from allocator.paged import PagedKVCacheManager
from allocator.profiles import profile_for
from allocator.registry import make_manager as make_registered
from allocator.request import Request


def make_manager(num_blocks: int = 11, block_size: int = 4, **kwargs: object) -> PagedKVCacheManager:
    config = ManagerConfig(
        num_gpu_blocks=num_blocks, block_size=block_size, max_model_len=64, **kwargs  # type: ignore[arg-type]
    )
    return PagedKVCacheManager.from_config(config)


def admit(manager: PagedKVCacheManager, request_id: str, tokens: list[int], final: int = 6) -> Request:
    request = Request(
        request_id, tokens, max_tokens=32, block_hasher=manager.block_hasher, final_output_len=final
    )
    blocks, num_hit = manager.get_computed_blocks(request)
    assert manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, blocks) is not None
    request.num_computed_tokens = request.num_tokens
    return request


def child_of(manager: PagedKVCacheManager, parent: Request, request_id: str) -> Request:
    child = Request(
        request_id, parent.prompt_token_ids, max_tokens=32,
        block_hasher=manager.block_hasher, final_output_len=parent.final_output_len,
    )
    if parent.output_token_ids:
        child.append_output_token_ids(list(parent.output_token_ids))
    manager.fork(parent, child)
    return child


def test_paged_manager_implements_the_protocol() -> None:
    """The paged manager satisfies the KVManager protocol the simulator calls."""
    assert isinstance(make_manager(), KVManager)


def test_fork_shares_every_block_without_copying() -> None:
    """A forked child gets the parent's block ids and every block's ref_cnt goes up by one."""
    manager = make_manager()
    parent = admit(manager, "p", list(range(6)))
    child = child_of(manager, parent, "c")
    assert manager.get_block_ids("c") == manager.get_block_ids("p") == ([1, 2],)
    assert [manager.block_pool.blocks[i].ref_cnt for i in (1, 2)] == [2, 2]
    assert child.num_computed_tokens == 6
    assert child.block_hashes == parent.block_hashes
    assert manager.take_copy_plan() == []


def test_writer_into_shared_partial_block_copies_it_last_holder_writes_in_place() -> None:
    """The first writer of a shared partial block gets a copy; the last holder keeps it."""
    manager = make_manager()
    parent = admit(manager, "p", list(range(6)))
    child = child_of(manager, parent, "c")
    for request in (parent, child):
        request.append_output_token_ids(9)
    assert manager.allocate_slots(parent, 1) is not None
    assert manager.take_copy_plan() == [(2, 3)]
    assert manager.get_block_ids("p") == ([1, 3],)
    assert manager.allocate_slots(child, 1) is not None
    assert manager.take_copy_plan() == []
    assert manager.get_block_ids("c") == ([1, 2],)
    assert manager.block_pool.blocks[1].ref_cnt == 2
    manager.check_invariants()


def test_full_blocks_stay_shared_after_fork() -> None:
    """A fork at a block boundary needs no copy: the next token goes into a fresh block."""
    manager = make_manager()
    parent = admit(manager, "p", list(range(8)))
    child = child_of(manager, parent, "c")
    for request in (parent, child):
        request.append_output_token_ids(9)
        assert manager.allocate_slots(request, 1) is not None
    assert manager.take_copy_plan() == []
    assert manager.get_block_ids("p") == ([1, 2, 3],)
    assert manager.get_block_ids("c") == ([1, 2, 4],)


def test_copy_on_write_that_does_not_fit_changes_nothing() -> None:
    """With no block free for the copy, allocate_slots returns None and nothing changes."""
    manager = make_manager(num_blocks=3)
    parent = admit(manager, "p", list(range(6)))
    child_of(manager, parent, "c")
    parent.append_output_token_ids(9)
    before = (manager.memory_snapshot(), manager.get_block_ids("p"))
    assert manager.allocate_slots(parent, 1) is None
    assert (manager.memory_snapshot(), manager.get_block_ids("p")) == before
    assert manager.take_copy_plan() == []


def test_fork_errors_name_the_request() -> None:
    """Forking from a parent without blocks or into a child with other tokens raises."""
    manager = make_manager()
    parent = admit(manager, "p", list(range(6)))
    stranger = Request("x", [7, 7], max_tokens=4)
    with pytest.raises(ValueError, match="'x'"):
        manager.fork(stranger, Request("y", [7, 7], max_tokens=4))
    with pytest.raises(ValueError, match="'z'"):
        manager.fork(parent, Request("z", [1, 2, 3], max_tokens=4))


def test_swap_out_and_in_round_trip_with_one_copy_per_shared_block() -> None:
    """Swapping out a fork group copies a shared block once; swap-in restores sharing."""
    manager = make_manager(num_cpu_blocks=4)
    parent = admit(manager, "p", list(range(6)))
    child = child_of(manager, parent, "c")
    plan_parent = manager.swap_out(parent)
    plan_child = manager.swap_out(child)
    assert plan_parent == [(1, 0), (2, 1)]
    assert plan_child == []
    assert manager.block_pool.get_num_free_blocks() == 10
    assert manager.swap_space.cpu_tables == {"p": [0, 1], "c": [0, 1]}
    assert manager.can_swap_in(parent)
    back = manager.swap_in(parent) + manager.swap_in(child)
    assert len(back) == 2
    assert manager.get_block_ids("p") == manager.get_block_ids("c")
    assert len(manager.swap_space.free_cpu_blocks) == 4
    manager.check_invariants()


def test_swap_out_needs_cpu_space() -> None:
    """Without CPU blocks a swap-out is refused by the query and raises if forced."""
    manager = make_manager(num_cpu_blocks=1)
    request = admit(manager, "p", list(range(6)))
    assert not manager.can_swap_out(request)
    with pytest.raises(NoFreeBlocksError):
        manager.swap_out(request)


def test_swapped_out_blocks_leave_the_gpu_prefix_cache() -> None:
    """A full block freed by a swap-out can no longer be hit on the GPU."""
    manager = make_manager(num_cpu_blocks=4)
    request = admit(manager, "p", list(range(6)))
    manager.swap_out(request)
    probe = Request("q", list(range(6)), max_tokens=4, block_hasher=manager.block_hasher)
    assert manager.get_computed_blocks(probe)[1] == 0


def test_snapshot_splits_tail_blocks_into_reserved_and_internal() -> None:
    """Token states, reserved and internal slots follow the request's final length."""
    manager = make_manager()
    request = admit(manager, "p", list(range(6)), final=1)
    snapshot = manager.memory_snapshot()
    assert (snapshot.token_states, snapshot.reserved, snapshot.internal_frag) == (6, 0, 2)
    assert snapshot.capacity == 40 and snapshot.null_slots == 4
    manager.free(request)
    snapshot = manager.memory_snapshot()
    assert (snapshot.cached_evictable, snapshot.free) == (4, 36)


def test_snapshot_counts_shared_slots_once_and_logical_slots_per_sequence() -> None:
    """Sharing shows as logical_slots above token_states."""
    manager = make_manager()
    parent = admit(manager, "p", list(range(6)))
    child_of(manager, parent, "c")
    snapshot = manager.memory_snapshot()
    assert snapshot.token_states == 6
    assert snapshot.logical_slots == 12


def test_from_config_carries_the_release_profile() -> None:
    """ManagerConfig defaults to 0.14 behaviour; a profile reaches the pool, the hasher and
    the admission options."""
    assert ManagerConfig(num_gpu_blocks=8).vllm_profile == profile_for("0.14")
    default = PagedKVCacheManager.from_config(ManagerConfig(num_gpu_blocks=8))
    assert default.block_pool.free_order == "append"
    assert default.block_hasher is not None and default.block_hasher.extra_keys == "plain"
    config = ManagerConfig(num_gpu_blocks=10, vllm_profile=profile_for("0.33"), watermark=0.2,
                           sliding_window=4, max_in_flight_tokens=8)
    manager = PagedKVCacheManager.from_config(config)
    assert manager.block_pool.free_order == "lifo_unhashed"
    assert not manager.block_pool.track_null_ref_cnt
    assert manager.block_hasher is not None and manager.block_hasher.extra_keys == "tagged"
    assert manager.watermark_blocks == 2
    assert manager.single_type_manager.max_admission_blocks_per_request == 2  # cdiv(11, 16) + 1
    nocache = make_registered("paged-nocache", config)
    assert nocache.vllm_profile.version == "0.33"  # type: ignore[attr-defined]
