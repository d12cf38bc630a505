"""Coasting: the fast path runs the quiet steps that follow a step in one go.

A quiet step is one the reference loop would run with only steady sequences and no waiting
ones, every due ``allocate_slots`` call sure to succeed, and any sequence whose last token is
due needing no call (it then finishes at the step's end). Its batch is the steady set, so its
time is the step model's for that set, and its calls, frees, memory snapshot and row are
exactly the reference step's. Steps are taken up to the first that ends after the next
arrival (the waiting queue stays empty while they are planned, and the arrival comes before
the engine resumes, as it would step by step; a step ending exactly at it stops coasting,
since their order would then depend on event ids), and none ends after ``2 * now``: then
``now + (end - now)`` is exactly ``end`` (Sterbenz), so the one timeout the engine yields
lands on the time that step-by-step timeouts would have reached.
Under async scheduling (``coast_ahead``) step k+1 is planned while step k runs, so a coasted
step is the scheduler's own: plan k+1 (``Scheduler.schedule``, sure to wake no one: no
active or waiting sequence, no last token due, calls that cannot fail, budget for all), then
apply and record k (``Scheduler.complete``); the plan left in flight goes back to the engine.
Finishes are not coasted there (a last token is planned, then done in flight, then freed).
"""
from __future__ import annotations

from collections.abc import Callable

from sim.cost.step_base import StepModel, StepTime
from sim.results.metrics import QUIET, STEP_COLUMNS, RunLog, step_row
from sim.sched.plan import StepPlan
from sim.sched.steady import SteadySet, by_key
from sim.workload.sequence import Seq

_WAITING = STEP_COLUMNS.index("num_waiting")

Complete = Callable[[StepPlan, StepTime, float, float, float], None]
"""The scheduler's end of a step: apply the plan, then record its row (plan, step time,
start, duration, swap seconds)."""
Schedule = Callable[[float], "StepPlan | None"]
"""The scheduler's planning of the next step at a time."""
Price = Callable[[StepPlan], StepTime]
"""The engine's step time of a plan."""


class Coaster:
    """Quiet steps of a fast-path scheduler, run under one engine timeout."""

    def __init__(self, steady: SteadySet, log: RunLog, complete: Complete) -> None:
        self.steady = steady
        self.state = steady.state
        self.log = log
        self.complete = complete
        self.num_coasted = 0
        """Steps run by :meth:`coast` (of them ``num_coasted_finishing`` with finishes)."""
        self.num_coasted_finishing = 0

    def coast(self, now: float, horizon: float, model: StepModel) -> float | None:
        """Run the quiet steps from ``now`` (see the module docstring) up to the next arrival
        at ``horizon``; returns when the last one ends (None: none ran)."""
        steady, state = self.steady, self.state
        n = steady.num_steady
        if (steady.active or state.waiting or state.swapped or not n or state.record_log
                or n > state.config.max_num_batched_tokens):
            return None
        last_end = 2 * now
        snapshot = steady.tally.snapshot
        first = state.step_index
        t = now
        while n:
            k = state.step_index
            st = model.predict_split(n, steady.steady_base + n * k, ())
            duration = st.attention_s + st.linear_s + st.overhead_s + 0.0
            end = t + duration
            if end > last_end or end == horizon:
                break
            finishing = self._step(k, st, t, duration)
            if finishing is None:
                break
            if finishing:
                n = steady.num_steady
            else:
                self.log.steps.append(step_row(
                    k, t, duration, st.attention_s, st.linear_s, st.overhead_s, 0.0,
                    len(state.running), state.num_running_groups, 0, 0, n, 0, n,
                    snapshot(steady.active_computed, steady.steady_base + n * (k + 1)), QUIET))
            t = end
            if end > horizon:
                break
        if state.step_index == first:
            return None
        self.num_coasted += state.step_index - first
        return t

    def coast_ahead(self, now: float, horizon: float, price: Price, plan: StepPlan,
                    schedule: Schedule) -> tuple[float, StepPlan] | None:
        """Async: run the quiet steps from ``now``, the first being ``plan`` (in flight), up
        to the next arrival at ``horizon`` (as ``coast`` does); returns when the last one
        ends and the plan then in flight (None: none ran)."""
        state = self.state
        if state.record_log:
            return None
        last_end = 2 * now
        first = state.step_index
        t = now
        while self._quiet_ahead():
            st = price(plan)
            duration = st.attention_s + st.linear_s + st.overhead_s + 0.0
            end = t + duration
            if end > last_end or end == horizon:
                break
            following = schedule(t)
            if following is None or following.seqs:
                raise AssertionError("a quiet step planned a sequence")
            following.overlapped = True
            self.complete(plan, st, t, duration, 0.0)
            plan, t = following, end
            if end > horizon:
                break
        if state.step_index == first:
            return None
        self.num_coasted += state.step_index - first
        return t, plan

    def _quiet_ahead(self) -> bool:
        """Async: whether planning the next step wakes no one (only steady sequences, none
        of them due a last token, due calls sure to succeed, budget for all of them)."""
        steady, state = self.steady, self.state
        n = steady.num_steady
        if (steady.active or steady.owed or state.waiting or state.swapped or not n
                or n > state.config.max_num_batched_tokens):
            return False
        k = steady.clock
        bucket = steady.buckets.get(k)
        if bucket is None:
            return True
        quiet = self._quiet_calls(bucket, k)
        return quiet is not None and not quiet[1]

    def _step(self, k: int, st: StepTime, start: float, duration: float) -> bool | None:
        """Run quiet step ``k``: True if sequences finished in it (the scheduler recorded
        it), False if not (its row is the caller's), None if it is not quiet (not run)."""
        steady = self.steady
        bucket = steady.buckets.get(k)
        if bucket is not None:
            quiet = self._quiet_calls(bucket, k)
            if quiet is None:
                return None
            del steady.buckets[k]
            if quiet[1]:
                self._finishing_step(quiet[0], quiet[1], st, start, duration)
                return True
            for seq in quiet[0]:
                steady.call(seq)  # cannot fail: checked by _quiet_calls
        self.state.step_index = k + 1
        return False

    def after_coast(self) -> None:
        """Once the engine has resumed at the end of the coasted steps: the last step's row
        counts the requests that arrived during it, as a row taken step by step would."""
        row = self.log.steps[-1]
        self.log.steps[-1] = (*row[:_WAITING], self.state.num_waiting(), *row[_WAITING + 1:])

    def _finishing_step(self, due: list[Seq], finishing: list[Seq], st: StepTime,
                        start: float, duration: float) -> None:
        """A quiet step in which the ``finishing`` sequences compute their last token: they
        wake and are planned as the reference loop plans them (no call), the due calls run in
        running order, and the scheduler's own end of step closes it."""
        steady = self.steady
        self.num_coasted_finishing += 1
        for seq in finishing:
            steady.wake(seq)
        # Planning a woken sequence touches no manager state, so the calls can go first.
        for seq in due:
            steady.call(seq)  # cannot fail: checked by _quiet_calls
        plan = StepPlan(self.state.config.max_num_batched_tokens,
                        draft_slots=self.state.config.draft_slots)
        for seq in sorted(finishing, key=by_key):
            plan.add(seq, 1, seq.req.num_computed_tokens)
        steady.after_run(plan, None)
        self.complete(plan, st, start, duration, 0.0)

    def _quiet_calls(self, bucket: list[tuple[Seq, int]], k: int
                     ) -> tuple[list[Seq], list[Seq]] | None:
        """Step ``k``'s due calls in running order and the sequences finishing in it, or None
        if the step is not quiet (a last token due with a call, or the calls need more new
        blocks than are free)."""
        due = []
        finishing = []
        need = 0
        for seq, gen in bucket:
            if not seq.steady or seq.gen != gen:
                continue
            c = seq.base + k
            if c >= seq.last_c:
                if c >= seq.call_at:
                    return None
                finishing.append(seq)
                continue
            if c >= seq.held:
                need += 1
            due.append(seq)
        if not self.steady.tally.can_take(need):
            return None
        if len(due) > 1:
            due.sort(key=by_key)
        return due, finishing
