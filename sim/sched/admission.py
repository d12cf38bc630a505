"""Admission of waiting requests (vLLM v1's waiting-queue loop).

Waiting entries are fresh groups (built into sequences only when they reach the head) or
*units*: lists of sequences admitted together. A lone sequence is a unit of one; a group
that has forked (cow samples, beams) and was preempted by recompute comes back as one unit,
admitted all or nothing. Contiguous managers cannot share, so there every sample and beam is
its own sequence with its own region (``independent``), as in the paper's baselines. Heads
are admitted in FCFS (or priority) order through ``get_computed_blocks`` + ``allocate_slots``
(under the release's admission gate, ``policy.admit_call``) while the budget and
``max_num_seqs`` (and ``max_num_active_seqs``) allow; the first failure stops admission.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from allocator.request import RequestStatus
from sim.config import RunConfig
from sim.sched.plan import StepPlan
from sim.sched.policy import admit_call, priority_to_front
from sim.sched.state import SchedState, Unit
from sim.workload.sequence import REJECTED, RUNNING, WAITING, Group, Seq


class Admission:
    """The waiting side of a scheduler.

    Args:
        state: the scheduler's shared state.
        split: whether a group's samples or beams start as separate sequences (contiguous
            managers; fanout samples) or as one that forks after its prefill.
        request_batching: FasterTransformer-style batches: a new batch forms only once the
            previous one has drained, and no request joins a running batch.
        can_ever_fit: an up-front check that rejects a request the empty pool cannot hold.
    """

    def __init__(self, state: SchedState, *, split: Callable[[Group], bool],
                 request_batching: bool = False,
                 can_ever_fit: Callable[[Group], bool] | None = None) -> None:
        self.state = state
        self.split = split
        self.request_batching = request_batching
        self.can_ever_fit = can_ever_fit
        self.forming = True
        self.failed: tuple[Any, ...] | None = None
        config = state.config
        self.allocate = admit_call(state.manager, config)
        self.priority = config.scheduling_policy == "priority"
        self.max_seqs = min(config.max_num_seqs, config.max_num_active_seqs or sys.maxsize)
        self.pad: Callable[[Seq, int, StepPlan, int], int | None] | None = None
        """Speculative decoding's placeholder drafts for a request with one token left
        (``StepExtras.pad_drafts``), where the release pads."""
        self.num_running = 0
        """Entries of the plan the running loop scheduled (read by ``pad``)."""

    def add_group(self, group: Group) -> None:
        """A request arrives: queue it, or reject it at once when it can never be served."""
        if group.reject_reason is None and self.can_ever_fit and not self.can_ever_fit(group):
            group.reject_reason = "exceeds_pool"
        if group.reject_reason is not None:
            self.state.reject(group)
            return
        self.state.waiting.append(group)

    def admit(self, plan: StepPlan) -> None:
        """Admit waiting heads into ``plan`` until one fails or budget or seats run out."""
        if self.request_batching and not self._batch_open():
            return
        state = self.state
        waiting, running = state.waiting, state.running
        max_seqs = self.max_seqs
        self.num_running = len(plan.seqs)
        while waiting and plan.budget > 0 and len(running) < max_seqs:
            if self.priority:
                priority_to_front(waiting)
            unit = self._head_unit()
            if unit is None:
                continue
            if unit[0].group.status == REJECTED:
                waiting.popleft()
                continue
            width = unit[0].group.width if unit[0].pending_fork else len(unit)
            if len(running) + width > max_seqs:
                self.forming = False
                return
            if not self._admit_unit(unit, plan):
                self.forming = False
                self._check_unservable(unit, plan)
                return
            waiting.popleft()
        if not waiting:
            self.forming = False

    def _batch_open(self) -> bool:
        """Request-level batching (FT): a new batch forms only once the last one drained."""
        if not self.state.running:
            self.forming = True
        return self.forming

    def _head_unit(self) -> Unit | None:
        """The head as a unit; a fresh group at the head is first built into sequences (each
        queued as its own unit, or one that forks later), and None is returned."""
        waiting = self.state.waiting
        head = waiting[0]
        if isinstance(head, list):
            return head
        waiting.popleft()
        seqs = self.state.workload.first_seqs(head, self.split(head))
        head.seqs = list(seqs)
        head.num_live = len(seqs)
        head.status = RUNNING
        if len(seqs) == 1 and head.width > 1:
            seqs[0].pending_fork = True
            head.num_live = 1
        for seq in reversed(seqs):
            waiting.appendleft([seq])
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
        state = self.state
        req = seq.req
        seq.flush()
        blocks, hit = state.manager.get_computed_blocks(req)
        n = seq.num_tokens - hit
        if n == 1 and self.pad is not None:
            drafts = self.pad(seq, hit, plan, self.num_running)
            if drafts is None:
                return False
            n += drafts
        n = min(n, state.prefill_cap)
        if not state.config.chunked_prefill and n > plan.budget:
            return False
        n = min(n, plan.budget)
        key = (id(seq), state.epoch, n, hit)
        if single and key == self.failed:
            return False
        if self.allocate(req, n, hit, blocks, bool(state.running)) is None:
            self.failed = key if single else None
            return False
        req.status = RequestStatus.RUNNING
        req.num_computed_tokens = hit
        state.join_running(seq)
        if state.tracker is not None:
            state.tracker.admitted(seq, hit)
        state.allocated(seq, n)
        plan.add(seq, n, hit)
        plan.prefix_queries += req.num_tokens
        plan.prefix_hits += hit
        if seq.group.cached_tokens is None:
            seq.group.cached_tokens = hit
        if plan.events is not None and hit:
            plan.note("prefix_hits", {"request_id": req.request_id, "sample": seq.sample,
                                      "num_tokens": hit,
                                      "block_ids": list(blocks.get_block_ids()[0]),
                                      "token_ids": list(req.all_token_ids[:hit])})
        return True

    def _free_back(self, seq: Seq) -> None:
        """Undo a partial admission of a unit: free the sequence and queue it again."""
        self.state.leave_running(seq)
        self.state.free_seq(seq)
        seq.req.num_computed_tokens = 0
        seq.req.status = RequestStatus.WAITING
        seq.status = WAITING

    def _check_unservable(self, unit: Unit, plan: StepPlan) -> None:
        """A head that fails with nothing else holding memory can never run: reject it."""
        state = self.state
        if state.running or state.swapped or not plan.empty:
            return
        state.abandon(unit[0].group)


def fits_empty_pool(config: RunConfig) -> Callable[[Group], bool]:
    """The up-front check for paged managers: a request's whole KV fits the empty pool
    (cow samples and beams share their prompt's full blocks)."""
    bs, usable = config.cache.block_size, config.cache.num_gpu_blocks - 1
    fanout = config.scheduler.sampling_mode == "fanout"

    def fits(group: Group) -> bool:
        own = -(-(group.prompt_len + group.output_len - 1) // bs)
        if group.width == 1 or (fanout and group.beam_width == 1):
            return own <= usable
        shared = group.prompt_len // bs
        return shared + group.width * (own - shared) <= usable
    return fits
