"""vLLM v1's scheduling policy over any KV manager (``../shared/docs/vllm_kv_semantics.md`` s.8).

Each step: (1) running sequences in running order, while the token budget lasts, each asking
``allocate_slots`` for its new tokens; when that returns None the *last* running sequence is
preempted (and the request retried) until it succeeds or the request preempts itself;
(2) only if nothing was preempted: swapped-out groups come back (swap mode), then waiting
requests are admitted in FCFS order through ``get_computed_blocks`` + ``allocate_slots`` while
budget and ``max_num_seqs`` allow; the first failure stops admission. After the step each
sequence's computed count grows by its new tokens; one that caught up samples a token, and
finishes when it has its output length. This is the *reference loop*: every running sequence
is visited every step. ``sim/cohort.py`` derives the same results without the per-step visits.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.cost.step_base import StepTime
from sim.results.metrics import RunLog
from sim.sched.plan import StepPlan
from sim.sched.preemption import Preemption
from sim.workload.sequence import FINISHED, RUNNING, Group, Seq

if TYPE_CHECKING:
    from allocator.interface import KVManager
    from sim.config import RunConfig
    from sim.workload.workload import Workload


class Scheduler(Preemption):
    """Continuous batching with preemption; the reference loop (see the module docstring).

    Invariants: ``running`` maps key -> sequence in running order (keys only grow), every
    running sequence holds blocks in the manager, and a group's ``num_live`` counts its
    unfinished sequences.
    """

    def __init__(self, manager: KVManager, config: RunConfig, workload: Workload,
                 *, fanout: bool = False, request_batching: bool = False,
                 independent: bool = False) -> None:
        super().__init__(manager, config, workload, fanout=fanout,
                         request_batching=request_batching, independent=independent)

    def schedule(self, now: float) -> StepPlan | None:
        """Plan the next step at time ``now``; None when nothing can run."""
        plan = StepPlan(self.config.max_num_batched_tokens)
        if self.record_log:
            plan.events = {}
        self.now = now
        self._schedule_running(plan)
        if not plan.preempted:
            self._resume_swapped(plan)
            if not self.swapped:
                self._admit(plan)
        self._take_copies(plan)
        return None if plan.empty else plan

    def _schedule_running(self, plan: StepPlan) -> None:
        self._run_seqs(plan, list(self.running.values()))

    def _run_seqs(self, plan: StepPlan, seqs: list[Seq]) -> int | None:
        """Schedule ``seqs`` (running order) while budget lasts; the key that stopped it, if any."""
        max_len = self.config.max_model_len
        for seq in seqs:
            if plan.budget <= 0:
                break
            if seq.status != RUNNING:
                continue
            c = seq.req.num_computed_tokens
            n = min(seq.num_tokens - c, plan.budget, max_len - 1 - c)
            if n <= 0:
                continue
            if not self._allocate_running(seq, c, n, plan):
                return seq.key
            plan.add(seq, n, c)
        return None

    def _allocate_running(self, seq: Seq, c: int, n: int, plan: StepPlan) -> bool:
        """allocate_slots for a running sequence, preempting the last one until it fits.

        Returns False when ``seq`` itself was preempted (the running loop then stops).
        """
        if self.can_skip(seq, n):
            return True
        seq.flush()
        while True:
            if self.manager.allocate_slots(seq.req, n) is not None:
                break
            victim = self.running[next(reversed(self.running))]
            self.preempt(victim, plan)
            if seq.status != RUNNING:
                if not self.running and all(g is seq.group for g in self.swapped):
                    self.abandon(seq.group)
                return False
            seq.flush()
        self.epoch += 1
        self.after_allocate(seq, n)
        return True

    def can_skip(self, seq: Seq, n: int) -> bool:
        """Whether allocate_slots would provably change nothing (fast path only)."""
        return False

    def snapshot(self) -> tuple[int, ...]:
        """The memory snapshot after the step, as a tuple in STEP_COLUMNS order."""
        snap = self.manager.memory_snapshot()
        return (snap.token_states, snap.reserved, snap.internal_frag, snap.cached_evictable,
                snap.external_frag, snap.free, snap.logical_slots)

    def apply(self, plan: StepPlan, now: float, start: float) -> None:
        """Advance every scheduled sequence by its tokens; sample, finish and fork."""
        self.now = now
        touched: list[Group] = []
        for seq, n in zip(plan.seqs, plan.tokens):
            if seq.status != RUNNING:
                continue
            req = seq.req
            req.num_computed_tokens += n
            group = seq.group
            if group.first_scheduled is None:
                group.first_scheduled = start
            if req.num_computed_tokens >= seq.num_tokens:
                self.sample(seq, plan)
                if group.forked and group.beam_width > 1 and group.status == RUNNING:
                    touched.append(group)
        for group in dict.fromkeys(touched):
            self.sampling.beam_step(group, plan)
        self.step_index += 1

    def sample(self, seq: Seq, plan: StepPlan) -> None:
        """The sequence caught up: it samples one token (forking first if it must)."""
        group = seq.group
        if seq.pending_fork:
            seq.pending_fork = False
            self.sampling.fork_after_prefill(seq, plan)
        seq.num_out += 1
        if self.eager_append:
            seq.flush()
        if group.first_token is None:
            group.first_token = self.now
        if seq.num_out >= group.output_len:
            self.finish_seq(seq, plan)

    def finish_seq(self, seq: Seq, plan: StepPlan | None) -> None:
        """Free a sequence that produced its last token; close its group when it was the last."""
        if plan is not None and plan.events is not None:
            plan.note("frees", self.free_record(seq, "finished"))
        self.running.pop(seq.key, None)
        self.leave_running(seq)
        self.free_seq(seq)
        seq.status = FINISHED
        group = seq.group
        group.num_live -= 1
        if group.num_live == 0 and group.status == RUNNING:
            group.status = FINISHED
            group.finish = self.now
            self.on_finish(group)

    def _take_copies(self, plan: StepPlan) -> None:
        copies = self.manager.take_copy_plan()
        if copies:
            plan.num_copies += len(copies)
            self.num_cow_copies += len(copies)
            if plan.events is not None:
                plan.events.setdefault("copies", []).extend(copies)

    def free_record(self, seq: Seq, reason: str) -> dict[str, Any]:
        """What the allocation log says about a sequence about to be freed."""
        return {"request_id": seq.request_id, "sample": seq.sample, "reason": reason,
                "block_ids": list(self.manager.get_block_ids(seq.request_id)[0])}


def record_step(log: RunLog, sched: Any, plan: StepPlan, st: StepTime, start: float,
                duration: float, swap_s: float, snap: tuple[int, ...]) -> None:
    """Append one row in ``metrics.STEP_COLUMNS`` order."""
    num_decode, _, prefills, total = plan.split()
    log.steps.append((
        sched.step_index - 1, start, duration, st.attention_s, st.linear_s, st.overhead_s,
        swap_s, len(sched.running), sched.num_running_groups, sched.num_waiting(),
        len(sched.swapped), num_decode + len(prefills), total - num_decode, num_decode,
        *snap, plan.prefix_queries, plan.prefix_hits, plan.num_preemptions, plan.num_copies,
        plan.swap_out_blocks, plan.swap_in_blocks,
    ))
