"""Preemption and swapping: what happens when ``allocate_slots`` fails for a running sequence.

Following vLLM, the victim is the last running sequence. Recompute preemption (vLLM v1's only
mode, the default) frees its blocks, resets its computed count and puts it at the head of the
waiting queue. Swap preemption (vLLM v0, ``--preemption swap``) moves its blocks to the CPU
pool; swapped groups wait in their own queue, which is served before any waiting request,
and a sequence coming back runs in the same step if its slot fits. When the CPU pool cannot
take it (or the manager cannot swap) the preemption falls back to recompute. A forked group
(cow samples, beams) is preempted whole; fanout samples are independent requests.
"""
from __future__ import annotations

from allocator.interface import NoFreeBlocksError
from allocator.request import RequestStatus
from sim.sched.plan import StepPlan
from sim.sched.state import SchedState, num_new_tokens
from sim.workload.sequence import RUNNING, SWAPPED, WAITING, Seq


class Preemption:
    """The preemption and swap side of a scheduler."""

    def __init__(self, state: SchedState) -> None:
        self.state = state

    def preempt(self, victim: Seq, plan: StepPlan) -> None:
        """Preempt the victim (its whole group once the group has forked)."""
        state = self.state
        group = victim.group
        seqs = [s for s in group.seqs if s.status == RUNNING] if group.forked else [victim]
        for seq in seqs:
            state.leave_running(seq)
            plan.remove(seq)
            seq.flush()
        plan.preempted = True
        plan.num_preemptions += 1
        state.num_preemptions += 1
        group.num_preemptions += 1
        state.epoch += 1
        if state.config.preemption == "swap" and self._swap_out(seqs, plan):
            state.swapped.append(group)
            return
        for seq in seqs:
            plan.note("frees", state.free_record(seq, "preempted"))
            state.free_seq(seq)
            seq.req.num_computed_tokens = 0
            seq.req.num_preemptions += 1
            seq.req.status = RequestStatus.PREEMPTED
            seq.status = WAITING
        if group.forked:
            state.waiting.appendleft(seqs)
        else:
            for seq in reversed(seqs):
                state.waiting.appendleft([seq])

    def _swap_out(self, seqs: list[Seq], plan: StepPlan) -> bool:
        moved: list[Seq] = []
        try:
            for seq in seqs:
                mapping = self.state.manager.swap_out(seq.req)
                if not mapping and seq.req.num_computed_tokens > 0:
                    raise NoFreeBlocksError("manager cannot swap")
                plan.swap_out_blocks += len(mapping)
                plan.note("swap_out", {"request_id": seq.request_id, "map": mapping})
                seq.status = SWAPPED
                moved.append(seq)
        except NoFreeBlocksError:
            for seq in moved:
                seq.status = RUNNING
            self.state.num_swap_fallbacks += 1
            return False
        return True

    def resume_swapped(self, plan: StepPlan) -> None:
        """Bring swapped-out groups back in FCFS order while the GPU pool and seats allow."""
        state = self.state
        while state.swapped:
            group = state.swapped[0]
            for seq in group.seqs:
                if seq.status != SWAPPED:
                    continue
                if len(state.running) >= state.config.max_num_seqs:
                    return
                if not state.manager.can_swap_in(seq.req):
                    return
                mapping = state.manager.swap_in(seq.req)
                state.epoch += 1
                plan.swap_in_blocks += len(mapping)
                plan.note("swap_in", {"request_id": seq.request_id, "map": mapping})
                state.join_running(seq)
                self._run_resumed(seq, plan)
            state.swapped.popleft()

    def _run_resumed(self, seq: Seq, plan: StepPlan) -> None:
        """A sequence back from the CPU runs in the same step if its slots fit (vLLM v0)."""
        state = self.state
        c = seq.req.num_computed_tokens
        n = num_new_tokens(seq.num_tokens, c, plan.budget, state.config.max_model_len)
        if n <= 0:
            return
        seq.flush()
        if state.manager.allocate_slots(seq.req, n) is not None:
            state.allocated(seq, n)
            plan.add(seq, n, c)
