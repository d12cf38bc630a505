"""Release-dependent scheduling rules (sim/sched/policy.py): the admission gate, the priority
order and victim, the 0.33 self-preemption rule and the long-prefill threshold with its 0.31
lone-request rule, each from the semantics doc's minimal sequences and through whole runs."""
from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest

from allocator.interface import ManagerConfig
from allocator.paged import PagedKVCacheManager
from allocator.profiles import profile_for
from allocator.request import Request
from sim.config import SchedulerConfig
from sim.sched.policy import NO_CAP, admit_call, pick_victim, prefill_cap, priority_to_front
from sim.workload.sequence import Group
from tests.unit.simkit import fast_and_reference, simulate, steps
from traces import Trace, TraceRequest


def _manager(num_blocks: int, block_size: int, version: str, sliding_window: int | None = None,
             **changes: Any) -> PagedKVCacheManager:
    profile = profile_for(version).replace(**changes)
    return PagedKVCacheManager.from_config(ManagerConfig(
        num_gpu_blocks=num_blocks, block_size=block_size, max_model_len=64,
        sliding_window=sliding_window, vllm_profile=profile,
        watermark=profile.watermark or 0.0, max_in_flight_tokens=4))


def _admit(manager: PagedKVCacheManager, num_tokens: int, chunk: int, busy: bool) -> Any:
    request = Request("r", list(range(num_tokens)), 1, block_hasher=manager.block_hasher)
    blocks, hit = manager.get_computed_blocks(request)
    call = admit_call(manager, SchedulerConfig(vllm_profile=manager.vllm_profile))
    return call(request, chunk, hit, blocks, busy)


@pytest.mark.parametrize("version, expected", [("0.14", [1]), ("0.18", [1]), ("0.19", None),
                                               ("0.20", None), ("0.21", None), ("0.33", None)])
def test_gate_p7(version: str, expected: list[int] | None) -> None:
    """P7: bs 4, N 4, a 16-token prompt with a 4-token chunk: 0.14 allocates [1]; from 0.19
    the whole prompt must fit, so the call is refused and nothing changes."""
    manager = _manager(4, 4, version)
    blocks = _admit(manager, 16, 4, busy=False)
    if expected is None:
        assert blocks is None
        assert manager.block_pool.get_num_free_blocks() == 3
    else:
        assert blocks.get_block_ids()[0] == expected


def test_gate_override_turns_it_off() -> None:
    """``reserve_full_isl=false`` on 0.33 admits the P7 chunk as 0.14 does."""
    manager = _manager(4, 4, "0.33", reserve_full_isl=False)
    assert _admit(manager, 16, 4, busy=False).get_block_ids()[0] == [1]


@pytest.mark.parametrize("busy, num_tokens, fits", [
    (True, 12, True), (True, 16, False), (False, 16, True), (False, 28, True),
    (False, 32, False)])
def test_gate_keeps_the_watermark_while_others_run(busy: bool, num_tokens: int,
                                                   fits: bool) -> None:
    """Watermark 0.5 of N 8 keeps 4 blocks free for a waiting request while others run
    (7 usable: 3 prompt blocks fit, 4 do not); with nothing running only the pool counts."""
    manager = _manager(8, 4, "0.33", watermark=0.5)
    assert (_admit(manager, num_tokens, 4, busy) is not None) == fits


@pytest.mark.parametrize("version, admitted", [("0.14", True), ("0.19", False),
                                               ("0.20", True), ("0.21", True), ("0.33", True)])
def test_gate_sliding_window_cap(version: str, admitted: bool) -> None:
    """Window 8, bs 4, 4 tokens in flight: a request never holds more than cdiv(8 - 1 + 4, 4)
    + 1 = 4 blocks, so from 0.20 the gate asks 4 of the 7 free blocks for a 40-token prompt;
    0.19 asks all 10 and refuses; 0.14 has no gate."""
    manager = _manager(8, 4, version, sliding_window=8)
    assert (_admit(manager, 40, 4, busy=False) is not None) == admitted


def test_max_num_active_seqs_limits_the_running_set() -> None:
    """--max-num-active-seqs 2 (0.31+): never more than two running sequences, all served."""
    trace = _trace([(0.0, 32, 6, 0) for _ in range(6)])
    result = simulate(trace, vllm_profile=profile_for("0.33"), max_num_active_seqs=2)
    assert max(steps(result)["num_running_seqs"]) == 2
    assert result.summary["num_finished"] == 6
    assert max(steps(simulate(trace))["num_running_seqs"]) == 6


def test_watermark_override_fast_path_matches_reference() -> None:
    """A 0.33 profile with a watermark (requests carry their scheduler status): the fast path
    gives the reference loop's bytes, and the watermark changes the run."""
    trace = _trace([(0.01 * i, 40 + 8 * i, 30, 0) for i in range(12)])
    profile = profile_for("0.33").replace(watermark=0.2)
    fast, _ = fast_and_reference(trace, num_gpu_blocks=30, vllm_profile=profile)
    plain = simulate(trace, num_gpu_blocks=30, vllm_profile=profile_for("0.33"))
    assert fast.log.step_columns() != plain.log.step_columns()
    assert fast.summary["num_finished"] == 12


def test_watermark_spares_running_requests() -> None:
    """Watermark 0.5 of 11 blocks: a running request (status RUNNING) grows from 4 to 8 blocks
    into the reserve without preempting itself; only admission keeps the 5 blocks back."""
    profile = profile_for("0.33").replace(watermark=0.5)
    result = simulate(_trace([(0.0, 64, 60, 0)]), num_gpu_blocks=11, vllm_profile=profile)
    assert result.summary["num_finished"] == 1 and result.summary["num_preemptions"] == 0


def _group(index: int, arrival: float, priority: int) -> Group:
    group = Group(index, f"r{index}", arrival, 16, 4, 4, 1, 1, None)
    group.priority = priority
    return group


def test_victim_is_last_fcfs_and_largest_priority_arrival() -> None:
    """FCFS preempts the last running; priority the largest (priority, arrival), the first
    such in running order on a tie."""
    groups = [_group(0, 0.0, 0), _group(1, 0.1, 5), _group(2, 0.2, 1), _group(3, 0.1, 5)]
    running = {k: SimpleNamespace(group=g) for k, g in enumerate(groups)}
    assert pick_victim(running, "fcfs") is running[3]  # type: ignore[arg-type]
    assert pick_victim(running, "priority") is running[1]  # type: ignore[arg-type]


def test_priority_order_of_waiting() -> None:
    """The waiting entry with the least (priority, arrival) moves to the head."""
    waiting: deque[Any] = deque([_group(0, 0.0, 3), _group(1, 0.5, 1), _group(2, 0.2, 1)])
    priority_to_front(waiting)
    assert [g.index for g in waiting] == [2, 0, 1]


@pytest.mark.parametrize("version, lone_cap", [("0.14", 16), ("0.30", 16), ("0.31", NO_CAP)])
def test_prefill_cap_lone_request_rule(version: str, lone_cap: int) -> None:
    """The threshold caps chunks; from 0.31 not while one request is in the scheduler."""
    config = SchedulerConfig(vllm_profile=profile_for(version), long_prefill_token_threshold=16)
    assert prefill_cap(config, 1) == lone_cap
    assert prefill_cap(config, 2) == 16
    assert prefill_cap(SchedulerConfig(vllm_profile=profile_for(version)), 2) == NO_CAP


def _trace(rows: list[tuple[float, int, int, int]]) -> Trace:
    return Trace.from_requests([TraceRequest(f"r{i}", a, p, o, line=i + 2, priority=prio)
                                for i, (a, p, o, prio) in enumerate(rows)])


@pytest.mark.parametrize("version, prefill_steps", [("0.14", 4), ("0.33", 1)])
def test_lone_request_prefills_in_one_chunk_from_031(version: str, prefill_steps: int) -> None:
    """A lone 64-token prompt under threshold 16: four chunks in 0.14, one in 0.33."""
    result = simulate(_trace([(0.0, 64, 3, 0)]), long_prefill_token_threshold=16,
                      vllm_profile=profile_for(version))
    assert sum(1 for t in steps(result)["prefill_tokens"] if t) == prefill_steps


def test_threshold_chunks_two_requests_in_every_release() -> None:
    """Two waiting requests: each prefill chunk is at most the threshold (16) in 0.33 too,
    and the fast path gives the reference loop's bytes."""
    fast, _ = fast_and_reference(_trace([(0.0, 64, 3, 0), (0.0, 48, 3, 0)]),
                                 long_prefill_token_threshold=16,
                                 vllm_profile=profile_for("0.33"))
    assert max(steps(fast)["prefill_tokens"]) == 32


def _first_scheduled(result: Any) -> list[float]:
    return list(result.log.request_columns()["first_scheduled_s"])


def test_priority_policy_admits_by_priority() -> None:
    """One seat: FCFS serves trace order, priority serves priorities 0, 1, 2."""
    trace = _trace([(0.0, 16, 2, 2), (0.0, 16, 2, 0), (0.0, 16, 2, 1)])
    fcfs = _first_scheduled(simulate(trace, max_num_seqs=1))
    prio = _first_scheduled(simulate(trace, max_num_seqs=1, scheduling_policy="priority"))
    assert fcfs == sorted(fcfs)
    assert prio[1] < prio[2] < prio[0]


@pytest.mark.parametrize("version, scheduled", [("0.14", 1), ("0.33", 2)])
def test_self_preemption_break_vs_continue(version: str, scheduled: int) -> None:
    """6 usable blocks: A (prio 0) and B (prio 9) run, C (prio 0) joins; at step 3 B needs a
    third block, the pool is empty and B is the victim itself. 0.14 stops the running loop
    (only A runs); 0.33 goes on to C behind it."""
    trace = _trace([(0.0, 20, 10, 0), (0.0, 31, 10, 9), (0.005, 20, 10, 0)])
    result = simulate(trace, num_gpu_blocks=7, scheduling_policy="priority",
                      vllm_profile=profile_for(version))
    cols = steps(result)
    assert cols["num_preemptions"][2] == 1
    assert cols["num_scheduled_seqs"][2] == scheduled
    assert result.summary["num_finished"] == 3


@pytest.mark.parametrize("version, preemptions", [("0.14", 1), ("0.19", 0), ("0.33", 0)])
def test_gate_waits_instead_of_preempting(version: str, preemptions: int) -> None:
    """6 usable blocks, budget 32: r0 (80-token prompt) prefills in three chunks; the third
    leaves 16 tokens for r1 (64 tokens). 0.14 admits that chunk and preempts r1 at r0's next
    block; from 0.19 r1 waits (its whole prompt does not fit), preempting nothing. The fast
    path gives the reference loop's bytes."""
    fast, _ = fast_and_reference(_trace([(0.0, 80, 10, 0), (0.0, 64, 2, 0)]),
                                 num_gpu_blocks=7, max_num_batched_tokens=32,
                                 vllm_profile=profile_for(version))
    assert fast.summary["num_preemptions"] == preemptions
    assert fast.summary["num_finished"] == 2

