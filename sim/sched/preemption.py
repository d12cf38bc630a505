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
from sim.sched.admission import Admission
from sim.sched.plan import StepPlan
from sim.workload.sequence import RUNNING, SWAPPED, WAITING, Seq


class Preemption(Admission):
    """The preemption and swap side of the scheduler."""

    def preempt(self, victim: Seq, plan: StepPlan) -> None:
        """Preempt the victim (its whole group once the group has forked)."""
        group = victim.group
        seqs = [s for s in group.seqs if s.status == RUNNING] if group.forked else [victim]
        for seq in seqs:
            self.running.pop(seq.key, None)
            self.leave_running(seq)
            plan.remove(seq)
            seq.flush()
        plan.preempted = True
        plan.num_preemptions += 1
        self.num_preemptions += 1
        group.num_preemptions += 1
        self.epoch += 1
        if self.config.preemption == "swap" and self._swap_out(seqs, plan):
            self.swapped.append(group)
            return
        for seq in seqs:
            plan.note("frees", self.free_record(seq, "preempted"))
            self.free_seq(seq)
            seq.req.num_computed_tokens = 0
            seq.req.num_preemptions += 1
            seq.status = WAITING
        if group.forked:
            self.waiting.appendleft(seqs)
        else:
            for seq in reversed(seqs):
                self.waiting.appendleft([seq])

    def _swap_out(self, seqs: list[Seq], plan: StepPlan) -> bool:
        moved: list[Seq] = []
        try:
            for seq in seqs:
                mapping = self.manager.swap_out(seq.req)
                if not mapping and seq.req.num_computed_tokens > 0:
                    raise NoFreeBlocksError("manager cannot swap")
                plan.swap_out_blocks += len(mapping)
                plan.note("swap_out", {"request_id": seq.request_id, "map": mapping})
                seq.status = SWAPPED
                moved.append(seq)
        except NoFreeBlocksError:
            for seq in moved:
                seq.status = RUNNING
            self.num_swap_fallbacks += 1
            return False
        return True

    def _resume_swapped(self, plan: StepPlan) -> None:
        while self.swapped:
            group = self.swapped[0]
            for seq in group.seqs:
                if seq.status != SWAPPED:
                    continue
                if len(self.running) >= self.config.max_num_seqs:
                    return
                if not self.manager.can_swap_in(seq.req):
                    return
                mapping = self.manager.swap_in(seq.req)
                self.epoch += 1
                plan.swap_in_blocks += len(mapping)
                plan.note("swap_in", {"request_id": seq.request_id, "map": mapping})
                self.join_running(seq)
                self._run_resumed(seq, plan)
            self.swapped.popleft()

    def _run_resumed(self, seq: Seq, plan: StepPlan) -> None:
        """A sequence back from the CPU runs in the same step if its slots fit (vLLM v0)."""
        c = seq.req.num_computed_tokens
        n = min(seq.num_tokens - c, plan.budget, self.config.max_model_len - 1 - c)
        if n <= 0:
            return
        seq.flush()
        if self.manager.allocate_slots(seq.req, n) is not None:
            self.epoch += 1
            self.after_allocate(seq, n)
            plan.add(seq, n, c)
