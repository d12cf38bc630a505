"""Release-dependent scheduling rules: the policy's order and victim, chunk caps, the gate.

vLLM's scheduler serves waiting requests FCFS or, with ``--scheduling-policy priority``, by
(priority, arrival) (lower priority values first), and preempts the last running request, or
under priority the running one with the largest (priority, arrival). A prefill chunk is at most
``long_prefill_token_threshold`` tokens (0.31+: not while a lone request is in the scheduler).
From 0.19 a waiting request is admitted only if its whole prompt fits (reserve-full-ISL, C7 of
``vllm_new_semantics.md``), through the manager call of the release. Everything here reads the
run's ``VllmProfile`` switches; nothing tests a version.
"""
from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from allocator.interface import KVManager
from allocator.kv_cache_manager import KVCacheManager
from allocator.request import Request
from sim.config import SchedulerConfig
from sim.workload.sequence import Group, Seq

NO_CAP = sys.maxsize

AdmitCall = Callable[[Request, int, int, Any, bool], Any]
"""``call(request, num_new_tokens, hit, hit_blocks, has_scheduled_reqs)``: the allocation of
a waiting request's first chunk; None when it is refused."""


def entry_group(entry: Group | list[Seq]) -> Group:
    """The group of a waiting entry (a fresh group, or a unit of its sequences)."""
    return entry if isinstance(entry, Group) else entry[0].group


def waiting_key(entry: Group | list[Seq]) -> tuple[int, float, int]:
    """vLLM's priority order of waiting requests: (priority, arrival), then trace order."""
    group = entry_group(entry)
    return group.priority, group.arrival, group.index


def priority_to_front(waiting: deque[Any]) -> None:
    """Move the first waiting entry with the least :func:`waiting_key` to the head."""
    best = min(range(len(waiting)), key=lambda i: waiting_key(waiting[i]))
    if best:
        entry = waiting[best]
        del waiting[best]
        waiting.appendleft(entry)


def pick_victim(running: dict[int, Seq], policy: str) -> Seq:
    """The sequence to preempt: the last running (FCFS), or the first running one with the
    largest (priority, arrival) (priority)."""
    if policy == "priority":
        return max(running.values(), key=lambda s: (s.group.priority, s.group.arrival))
    return running[next(reversed(running))]


def prefill_cap(config: SchedulerConfig, num_requests: int) -> int:
    """Most tokens one request computes this step: the long-prefill threshold, unless it is
    off, or the release skips it while ``num_requests`` (running + waiting) is one."""
    threshold = config.long_prefill_token_threshold
    if threshold <= 0 or (config.vllm_profile.long_prefill_lone_request and num_requests <= 1):
        return NO_CAP
    return threshold


def admit_call(manager: KVManager, config: SchedulerConfig) -> AdmitCall:
    """The allocation of a waiting request's first chunk under the release's admission gate.

    No gate (before 0.19, or a contiguous manager): plain ``allocate_slots``. 0.19-0.20:
    ``can_fit_full_sequence`` first; 0.21+: ``allocate_slots(full_sequence_must_fit=True)``
    (with the watermark). A refusal preempts nothing: admission stops for this step. The
    draft lookahead slots go with the first chunk where the release reserves them there.
    """
    profile = config.vllm_profile
    if not isinstance(manager, KVCacheManager):
        return lambda req, n, hit, blocks, busy: manager.allocate_slots(req, n, hit, blocks)
    paged = manager
    ahead = config.num_lookahead_tokens if profile.admission_lookahead else 0
    if not profile.reserve_full_isl:
        return lambda req, n, hit, blocks, busy: paged.allocate_slots(
            req, n, hit, blocks, num_lookahead_tokens=ahead, has_scheduled_reqs=busy)
    if profile.full_sequence_check == "can_fit_full_sequence":
        def can_fit_first(req: Request, n: int, hit: int, blocks: Any, busy: bool) -> Any:
            if not paged.can_fit_full_sequence(req, hit, blocks):
                return None
            return paged.allocate_slots(req, n, hit, blocks, num_lookahead_tokens=ahead,
                                        has_scheduled_reqs=busy)
        return can_fit_first
    return lambda req, n, hit, blocks, busy: paged.allocate_slots(
        req, n, hit, blocks, num_lookahead_tokens=ahead, full_sequence_must_fit=True,
        has_scheduled_reqs=busy)
