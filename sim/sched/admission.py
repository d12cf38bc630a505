"""Scheduler state and the admission of waiting requests (vLLM v1's waiting-queue loop).

Waiting entries are fresh groups (built into sequences only when they reach the head) or
*units*: lists of sequences admitted together. A lone sequence is a unit of one; a group
that has forked (cow samples, beams) and was preempted by recompute comes back as one unit,
admitted all or nothing. Contiguous managers cannot share, so there every sample and beam is
its own sequence with its own region (``independent``), as in the paper's baselines.
Preemption and swapping are in ``sim/preemption.py``; the running loop in ``sim/scheduler.py``.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sim.sched.plan import StepPlan
from sim.sched.sampling import Sampling
from sim.workload.sequence import REJECTED, RUNNING, WAITING, Group, Seq

if TYPE_CHECKING:
    from allocator.interface import KVManager
    from sim.config import RunConfig
    from sim.workload.workload import Workload

Unit = list[Seq]


class Admission:
    """Queues, counters, the waiting side of the scheduler and the fast path's hooks."""

    def __init__(self, manager: KVManager, config: RunConfig, workload: Workload,
                 *, fanout: bool, request_batching: bool, independent: bool = False) -> None:
        self.manager = manager
        self.run = config
        self.config = config.scheduler
        self.workload = workload
        self.fanout = fanout
        self.independent = independent
        self.request_batching = request_batching
        self.forming = True
        self.waiting: deque[Group | Unit] = deque()
        self.running: dict[int, Seq] = {}
        self.swapped: deque[Group] = deque()
        self.sampling = Sampling(self)
        self.next_key = 0
        self.step_index = 0
        self.epoch = 0
        self.failed: tuple[Any, ...] | None = None
        self.now = 0.0
        self.record_log = config.output.record_log
        self.eager_append = not config.scheduler.fast
        self.can_ever_fit: Callable[[Group], bool] | None = None
        self.on_finish: Callable[[Group], None] = lambda group: None
        self.on_reject: Callable[[Group], None] = lambda group: None
        self.num_running_groups = 0
        self.num_preemptions = 0
        self.num_cow_copies = 0
        self.num_swap_fallbacks = 0
        self.prefix_queries = 0
        self.prefix_hits = 0

    def add_group(self, group: Group) -> None:
        """A request arrives: queue it, or reject it at once when it can never be served."""
        if group.reject_reason is None and self.can_ever_fit and not self.can_ever_fit(group):
            group.reject_reason = "exceeds_pool"
        if group.reject_reason is not None:
            self.reject(group)
            return
        self.waiting.append(group)

    def reject(self, group: Group) -> None:
        group.status = REJECTED
        self.on_reject(group)

    @property
    def idle(self) -> bool:
        """Nothing waiting, running or swapped."""
        return not self.waiting and not self.running and not self.swapped

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
        """Bookkeeping when a sequence leaves the running order (the caller pops it)."""
        group = seq.group
        group.num_running -= 1
        if group.num_running == 0:
            self.num_running_groups -= 1

    def num_waiting(self) -> int:
        """Waiting queue entries (requests not yet started, or sequences to re-admit)."""
        return len(self.waiting)

    def give_up(self) -> None:
        """End of trace with requests that can no longer be scheduled: reject them."""
        groups = [g for g in self.swapped] + [s.group for s in self.running.values()]
        for seq in list(self.running.values()):
            self.running.pop(seq.key)
            self.leave_running(seq)
        for entry in self.waiting:
            groups.append(entry if isinstance(entry, Group) else entry[0].group)
        self.waiting.clear()
        self.swapped.clear()
        for group in dict.fromkeys(groups):
            if group.status in (REJECTED, "finished"):
                continue
            for seq in group.seqs:
                self.manager.free(seq.req)
            group.reject_reason = "unschedulable"
            self.reject(group)

    # ---- admission ----------------------------------------------------------------------

    def _admit(self, plan: StepPlan) -> None:
        if self.request_batching and not self._batch_open():
            return
        max_seqs = self.config.max_num_seqs
        while self.waiting and plan.budget > 0 and len(self.running) < max_seqs:
            unit = self._head_unit()
            if unit is None:
                continue
            if unit[0].group.status == REJECTED:
                self.waiting.popleft()
                continue
            width = unit[0].group.width if unit[0].pending_fork else len(unit)
            if len(self.running) + width > max_seqs:
                self.forming = False
                return
            if not self._admit_unit(unit, plan):
                self.forming = False
                self._check_unservable(unit, plan)
                return
            self.waiting.popleft()
        if not self.waiting:
            self.forming = False

    def _batch_open(self) -> bool:
        """Request-level batching (FT): a new batch forms only once the last one drained."""
        if not self.running:
            self.forming = True
        return self.forming

    def _head_unit(self) -> Unit | None:
        head = self.waiting[0]
        if isinstance(head, list):
            return head
        self.waiting.popleft()
        split = self.independent or (self.fanout and head.beam_width == 1)
        seqs = self.workload.first_seqs(head, split)
        head.seqs = list(seqs)
        head.num_live = len(seqs)
        head.status = RUNNING
        if len(seqs) == 1 and head.width > 1:
            seqs[0].pending_fork = True
            head.num_live = 1
        for seq in reversed(seqs):
            self.waiting.appendleft([seq])
        return None

    def _admit_unit(self, unit: Unit, plan: StepPlan) -> bool:
        done: list[Seq] = []
        for seq in unit:
            if plan.budget <= 0 or not self._admit_seq(seq, plan, len(unit) == 1):
                for seq_done in reversed(done):
                    plan.remove(seq_done)
                    self._free_back(seq_done)
                return False
            done.append(seq)
        return True

    def _admit_seq(self, seq: Seq, plan: StepPlan, single: bool) -> bool:
        req = seq.req
        seq.flush()
        blocks, hit = self.manager.get_computed_blocks(req)
        n = seq.num_tokens - hit
        if not self.config.chunked_prefill and n > plan.budget:
            return False
        n = min(n, plan.budget)
        key = (id(seq), self.epoch, n, hit)
        if single and key == self.failed:
            return False
        if self.manager.allocate_slots(req, n, hit, blocks) is None:
            self.failed = key if single else None
            return False
        self.epoch += 1
        req.num_computed_tokens = hit
        self.join_running(seq)
        self.after_admit(seq, hit, n)
        plan.add(seq, n, hit)
        plan.prefix_queries += req.num_tokens
        plan.prefix_hits += hit
        self.prefix_queries += req.num_tokens
        self.prefix_hits += hit
        if seq.group.cached_tokens is None:
            seq.group.cached_tokens = hit
        if plan.events is not None and hit:
            plan.note("prefix_hits", {"request_id": req.request_id, "sample": seq.sample,
                                      "num_tokens": hit,
                                      "block_ids": list(blocks.get_block_ids()[0]),
                                      "token_ids": list(req.all_token_ids[:hit])})
        return True

    # ---- hooks for the fast path (sim/cohort.py) -----------------------------------------

    def after_admit(self, seq: Seq, hit: int, n: int) -> None:
        """A waiting sequence was admitted with ``hit`` cached and ``n`` new tokens."""
        self.after_allocate(seq, n)

    def after_allocate(self, seq: Seq, n: int) -> None:
        """allocate_slots succeeded for ``n`` new tokens."""

    def on_freed(self, seq: Seq) -> None:
        """The sequence's blocks were freed."""

    def free_seq(self, seq: Seq) -> None:
        """Free a sequence's blocks in the manager."""
        self.manager.free(seq.req)
        self.epoch += 1
        self.on_freed(seq)

    def _free_back(self, seq: Seq) -> None:
        """Undo a partial admission of a unit: free the sequence and queue it again."""
        self.running.pop(seq.key, None)
        self.leave_running(seq)
        self.free_seq(seq)
        seq.req.num_computed_tokens = 0
        seq.status = WAITING

    def _check_unservable(self, unit: Unit, plan: StepPlan) -> None:
        """A head that fails with nothing else holding memory can never run: reject it."""
        if self.running or self.swapped or not plan.empty:
            return
        self.abandon(unit[0].group)

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
        raise NotImplementedError
