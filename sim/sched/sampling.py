"""Parallel sampling (n > 1) and beam search by fork and copy-on-write.

cow mode: a request with n samples (or beam width k) runs one prefill; when it completes, the
sequence forks n - 1 (k - 1) children that share every prompt block, the partial last one
included, and each sequence samples its own first token. Their first writes copy the shared
partial block (copy-on-write inside ``allocate_slots``). fanout mode needs nothing here: the
n samples are independent requests that share full prompt blocks through the prefix cache.

Beam model (seeded per request, so runs are reproducible): after each decode step in which
every live beam produced a token, new beam j keeps beam j as its parent with probability
``beam_keep_prob`` (0.75 by default), else picks a parent uniformly among the k beams. Beams
chosen by nobody are freed; a beam chosen c > 1 times continues as itself and forks c - 1
children, which share its blocks until they write. Every beam stops at the output length.
"""
from __future__ import annotations

import random
from collections import Counter

from sim.sched.plan import StepPlan
from sim.sched.state import SchedState
from sim.workload.sequence import FINISHED, RUNNING, Group, Seq


def choose_parents(rng: random.Random, k: int, keep_prob: float) -> list[int]:
    """Parent index of each of the k new beams (see the module docstring)."""
    return [j if rng.random() < keep_prob else rng.randrange(k) for j in range(k)]


class Sampling:
    """Forks and beam steps on behalf of a scheduler."""

    def __init__(self, state: SchedState) -> None:
        self.state = state

    def fork_after_prefill(self, parent: Seq, plan: StepPlan) -> None:
        """Fork the n - 1 samples (or k - 1 beams) of a group whose prefill just completed."""
        state = self.state
        group = parent.group
        group.forked = True
        parent.flush()
        beams = group.beam_width > 1
        count = group.beam_width if beams else group.n
        if beams and group.rng is None:
            group.rng = random.Random(f"{state.seed}:{group.request_id}")
        for sample in range(1, count):
            child = (state.workload.beam_child(parent) if beams
                     else state.workload.child_seq(parent, sample))
            self._fork(parent, child, plan)
            child.num_out += 1
            if state.eager_append:
                child.flush()
            if child.num_out >= group.output_len:
                state.finish_seq(child, plan)

    def _fork(self, parent: Seq, child: Seq, plan: StepPlan) -> None:
        state = self.state
        state.manager.fork(parent.req, child.req)
        state.epoch += 1
        group = parent.group
        child.sample = len(group.seqs)
        group.seqs.append(child)
        group.num_live += 1
        state.join_running(child)
        plan.note("forks", {"parent": parent.request_id, "child": child.request_id})

    def beam_step(self, group: Group, plan: StepPlan) -> None:
        """Choose parents for the next beams; free dead beams, fork popular ones."""
        beams = [s for s in group.seqs if s.status == RUNNING]
        if len(beams) < 2 or len({s.num_out for s in beams}) != 1 or beams[0].num_out < 2:
            return
        assert isinstance(group.rng, random.Random)
        parents = choose_parents(group.rng, len(beams), self.state.beam_keep_prob)
        counts = Counter(parents)
        for j, beam in enumerate(beams):
            if counts[j] == 0:
                self._drop(beam, plan)
        for j, beam in enumerate(beams):
            for _ in range(counts[j] - 1):
                self._fork(beam, self.state.workload.beam_child(beam), plan)

    def _drop(self, beam: Seq, plan: StepPlan) -> None:
        state = self.state
        plan.note("frees", state.free_record(beam, "beam_dropped"))
        state.leave_running(beam)
        state.free_seq(beam)
        beam.status = FINISHED
        beam.group.num_live -= 1
