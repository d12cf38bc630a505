"""What the scheduler's parts share: the queues, the counters and a sequence's life cycle.

A sequence joins the running order when admitted (or swapped back in, or forked), leaves it
when it finishes, is preempted or dropped, and has its blocks freed in the manager. These
steps, and the one rule for how many tokens a running sequence computes in a step, are
written once here and used by admission, preemption, sampling and the running loop alike.
The fast path follows the same events through a ``Tracker`` (``sim/sched/steady.py``).
"""
from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from allocator.interface import KVManager
from sim.config import RunConfig
from sim.sched.plan import StepPlan
from sim.workload.sequence import FINISHED, REJECTED, RUNNING, Group, Seq
from sim.workload.workload import Workload

Unit = list[Seq]
"""Sequences admitted together (all or none): one, or a forked group back from preemption."""


def num_new_tokens(num_tokens: int, computed: int, budget: int, max_model_len: int) -> int:
    """Tokens a running sequence computes this step: what it lacks, within the step's budget,
    and never its position ``max_model_len - 1`` or beyond (vLLM stops a request there)."""
    return min(num_tokens - computed, budget, max_model_len - 1 - computed)


class Tracker(Protocol):
    """What the fast path is told about sequences (``sim/sched/steady.py``)."""

    def admitted(self, seq: Seq, hit: int) -> None:
        """A waiting sequence joined the running order with ``hit`` cached tokens."""

    def allocated(self, seq: Seq, num_tokens: int) -> None:
        """``allocate_slots`` succeeded for ``num_tokens`` new tokens of ``seq``."""

    def left(self, seq: Seq) -> None:
        """The sequence left the running order."""

    def freed(self, seq: Seq) -> None:
        """The manager freed the sequence's blocks."""


class SchedState:
    """Queues, counters and life-cycle steps of one scheduler.

    Invariants: ``running`` maps key -> sequence in running order (keys only grow), every
    running sequence holds blocks in the manager, a group's ``num_live`` counts its
    unfinished sequences and ``num_running_groups`` the groups with a running sequence.
    ``epoch`` grows with every change of manager state (admission uses it to retry a failed
    head only once something changed).
    """

    def __init__(self, manager: KVManager, config: RunConfig, workload: Workload) -> None:
        self.manager = manager
        self.config = config.scheduler
        self.seed = config.workload.seed
        self.beam_keep_prob = config.workload.beam_keep_prob
        self.record_log = config.output.record_log
        self.workload = workload
        self.waiting: deque[Group | Unit] = deque()
        self.running: dict[int, Seq] = {}
        self.swapped: deque[Group] = deque()
        self.tracker: Tracker | None = None
        self.eager_append = True
        """Append each sampled token to its request at once (else just before the manager
        next reads the request: the fast path)."""
        self.next_key = 0
        self.step_index = 0
        self.epoch = 0
        self.now = 0.0
        self.on_finish: Callable[[Group], None] = lambda group: None
        self.on_reject: Callable[[Group], None] = lambda group: None
        self.num_running_groups = 0
        self.num_preemptions = 0
        self.num_cow_copies = 0
        self.num_swap_fallbacks = 0
        self.prefill_cap = sys.maxsize
        """Most tokens a request computes this step (``policy.prefill_cap``, set per step)."""

    def num_waiting(self) -> int:
        """Waiting queue entries (requests not yet started, or sequences to re-admit)."""
        return len(self.waiting)

    def join_running(self, seq: Seq) -> None:
        """Append a sequence to the running order."""
        seq.status = RUNNING
        seq.key = self.next_key
        self.next_key += 1
        self.running[seq.key] = seq
        group = seq.group
        if group.num_running == 0:
            self.num_running_groups += 1
        group.num_running += 1

    def leave_running(self, seq: Seq) -> None:
        """Take a sequence out of the running order."""
        self.running.pop(seq.key, None)
        group = seq.group
        group.num_running -= 1
        if group.num_running == 0:
            self.num_running_groups -= 1
        if self.tracker is not None:
            self.tracker.left(seq)

    def allocated(self, seq: Seq, num_tokens: int) -> None:
        """After ``allocate_slots`` succeeded for ``num_tokens`` new tokens of ``seq``."""
        self.epoch += 1
        if self.tracker is not None:
            self.tracker.allocated(seq, num_tokens)

    def free_seq(self, seq: Seq) -> None:
        """Free a sequence's blocks in the manager."""
        self.manager.free(seq.req)
        self.epoch += 1
        if self.tracker is not None:
            self.tracker.freed(seq)

    def finish_seq(self, seq: Seq, plan: StepPlan | None) -> None:
        """Free a sequence that produced its last token; close its group when it was the last."""
        if plan is not None and plan.events is not None:
            plan.note("frees", self.free_record(seq, "finished"))
        self.leave_running(seq)
        self.free_seq(seq)
        seq.status = FINISHED
        group = seq.group
        group.num_live -= 1
        if group.num_live == 0 and group.status == RUNNING:
            group.status = FINISHED
            group.finish = self.now
            self.on_finish(group)

    def reject(self, group: Group) -> None:
        """The request leaves unserved (its reason is set)."""
        group.status = REJECTED
        self.on_reject(group)

    def abandon(self, group: Group) -> None:
        """Reject a request that can never fit the pool, even alone ("exceeds_pool")."""
        while self.waiting and isinstance(self.waiting[0], list) \
                and self.waiting[0][0].group is group:
            self.waiting.popleft()
        if group in self.swapped:
            self.swapped.remove(group)
        for seq in group.seqs:
            self.manager.free(seq.req)
            seq.status = REJECTED
        group.reject_reason = "exceeds_pool"
        self.reject(group)

    def free_record(self, seq: Seq, reason: str) -> dict[str, Any]:
        """What the allocation log says about a sequence about to be freed."""
        return {"request_id": seq.request_id, "sample": seq.sample, "reason": reason,
                "block_ids": list(self.manager.get_block_ids(seq.request_id)[0])}
