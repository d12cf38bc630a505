"""The fast path: the reference loop's exact decisions without visiting steady decodes.

Two provably state-preserving shortcuts, checked by a test that compares every output byte
with the reference loop (``SchedulerConfig.fast = False``):

1. ``allocate_slots`` is skipped for a one-token step that needs no new block and fills no
   block (with caching off, filling a block changes nothing either). Such a call changes no
   manager state, so skipping it changes nothing. The next position that needs the call is
   ``call_at = min(held slots, next block end - 1)``.
2. A *steady* sequence (caught up, decoding, next call or finish still ahead) advances one
   token per step with no work at all: its computed count is ``base + step``, and it sleeps
   in a bucket keyed by the step of its next event (a call or its last token). Steps sum the
   steady contexts from running totals, and the memory snapshot comes from ``sim/tally.py``.
   A step whose token budget cannot cover everyone (a long prefill chunk) wakes every steady
   sequence and runs the reference loop, since then running order decides who is served.

Used only for the paged manager with full attention, recompute preemption and no forks.
"""
from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from allocator.kv_cache_manager import KVCacheManager
from allocator.paged import PagedKVCacheManager
from sim.results.metrics import STEP_COLUMNS, RunLog
from sim.sched.plan import StepPlan
from sim.sched.scheduler import Scheduler, record_step
from sim.sched.tally import PagedTally
from sim.workload.sequence import RUNNING, Seq
from sim.workload.sim_request import SimRequest

if TYPE_CHECKING:
    from collections.abc import Sequence

    from allocator.interface import KVManager
    from sim.config import RunConfig
    from sim.cost.step_base import StepModel, StepTime
    from sim.workload.workload import Workload


_WAITING = STEP_COLUMNS.index("num_waiting")


_by_key = attrgetter("key")
"""Running order (a C-level key function: sorts run at every step)."""


class FastScheduler(Scheduler):
    """Scheduler whose steps cost O(events), not O(running); same results by construction."""

    def __init__(self, manager: KVManager, config: RunConfig, workload: Workload,
                 *, fanout: bool = False) -> None:
        super().__init__(manager, config, workload, fanout=fanout)
        self.block_size = config.cache.block_size
        self.caching = bool(getattr(manager, "enable_caching", False))
        self.tally = PagedTally(manager, config.cache.block_size)
        self.buckets: dict[int, list[tuple[Seq, int]]] = {}
        self.active: dict[int, Seq] = {}
        self.active_computed = 0
        self.num_steady = 0
        self.steady_base = 0
        # A steady sequence's one-token call goes straight to vLLM's allocate_slots: the paged
        # manager's additions are idle here (no forks, so no copy-on-write; recompute
        # preemption, so no swap run to end; the request was registered when admitted).
        if not isinstance(manager, PagedKVCacheManager) or manager.has_forked:
            raise ValueError("the fast path needs a paged manager that has not forked")
        self.decode_allocate = KVCacheManager.allocate_slots.__get__(manager)
        self.free_queue = manager.block_pool.free_block_queue
        self.num_coasted = 0
        """Steps run by :meth:`coast` (of them ``num_coasted_finishing`` with finishes)."""
        self.num_coasted_finishing = 0

    # ---- steady set ----------------------------------------------------------------------

    def _wake(self, seq: Seq) -> None:
        """Make a steady sequence active again, with its computed count written back."""
        c = seq.base + self.step_index
        seq.req.num_computed_tokens = c
        seq.num_out = c + 1 - seq.num_prompt
        seq.steady = False
        seq.gen += 1
        self.num_steady -= 1
        self.steady_base -= seq.base
        self.active[seq.key] = seq
        self.active_computed += c

    def _settle(self, seq: Seq) -> None:
        """After a step (step_index already counts it), put a caught-up decoding sequence to
        sleep until its next event."""
        c = seq.req.num_computed_tokens
        if seq.status != RUNNING or c != seq.num_tokens - 1 or seq.num_out == 0:
            return
        last = seq.last_c
        event = min(seq.call_at, last)
        if event <= c:
            return
        seq.base = c - self.step_index
        seq.steady = True
        del self.active[seq.key]
        self.active_computed -= c
        self.num_steady += 1
        self.steady_base += seq.base
        self.buckets.setdefault(event - seq.base, []).append((seq, seq.gen))

    # ---- scheduling ----------------------------------------------------------------------

    def _schedule_running(self, plan: StepPlan) -> None:
        order = self._due_now()
        max_len = self.config.max_model_len
        want = self.num_steady
        for seq in self.active.values():
            c = seq.req.num_computed_tokens
            want += min(seq.num_tokens - c, max_len - 1 - c)
        if want > plan.budget:
            for seq in [s for s in self.running.values() if s.steady]:
                self._wake(seq)
            order = list(self.running.values())
        else:
            order.extend(self.active.values())
            order.sort(key=_by_key)
        stopped = self._run_seqs(plan, order)
        if stopped is not None:
            for key in reversed(list(self.running)):
                if key < stopped:
                    break
                if self.running[key].steady:
                    self._wake(self.running[key])
        plan.num_steady = self.num_steady
        plan.steady_context = self.steady_base + self.num_steady * self.step_index
        plan.budget -= self.num_steady

    def _due_now(self) -> list[Seq]:
        """Steady sequences whose event is this step: a last token wakes them (the step's
        results must be applied to them); a manager call is made in place (``_run_seqs``)."""
        due = []
        k = self.step_index
        for seq, gen in self.buckets.pop(k, ()):
            if not seq.steady or seq.gen != gen:
                continue
            if seq.base + k >= seq.last_c:
                self._wake(seq)
            else:
                due.append(seq)
        return due

    def _run_seqs(self, plan: StepPlan, seqs: list[Seq]) -> int | None:
        for seq in seqs:
            if seq.steady:
                if not self._steady_calls((seq,), plan):
                    return seq.key
            elif seq.status == RUNNING and not self._run_active(seq, plan):
                return seq.key
        return None

    def _run_active(self, seq: Seq, plan: StepPlan) -> bool:
        """The reference loop's body for one active sequence; False if it preempted itself."""
        if plan.budget <= 0:
            return True
        c = seq.req.num_computed_tokens
        n = min(seq.num_tokens - c, plan.budget, self.config.max_model_len - 1 - c)
        if n <= 0:
            return True
        if (n != 1 or c >= seq.call_at) and not self._allocate_running(seq, c, n, plan):
            return False
        plan.add(seq, n, c)
        return True

    def _steady_calls(self, seqs: Sequence[Seq], plan: StepPlan | None) -> bool:
        """Steady sequences' one-token allocate_slots at their events, in the given (running)
        order, each leaving its sequence steady: the hot path, so after_allocate is inlined
        and one call covers a whole step's due sequences. With ``plan`` (the reference loop's
        visit of one sequence) a failed call wakes it and takes the reference path, which
        preempts; without, calls cannot fail (``coast`` checked the free blocks)."""
        k = self.step_index
        bs = self.block_size
        caching = self.caching
        allocate = self.decode_allocate
        buckets = self.buckets
        for seq in seqs:
            base = seq.base
            c = base + k
            req = seq.req
            req.num_computed_tokens = c
            # The request's outputs are written back only when this call fills a block, the
            # one case where allocate_slots reads them (to cache the block under its hash);
            # otherwise it reads only num_computed_tokens. Other paths flush before reading.
            if (c + 1) % bs == 0:
                req.advance_to(c + 1)  # type: ignore[attr-defined]  # SimRequest (after_admit)
            held = seq.held
            if allocate(req, 1) is None:
                if plan is None:
                    raise AssertionError(f"{seq.request_id}: a quiet step's call failed")
                self._wake(seq)
                return self._run_active(seq, plan)
            self.epoch += 1
            last = seq.last_c
            # Comparisons rather than min(): this runs at every block boundary.
            if c >= held:
                final = last + 1
                new_held = (c // bs + 1) * bs
                tally = self.tally
                tally.held_slots += new_held - held
                tally.ceiling += (new_held if new_held < final else final) - (  # noqa: FURB136
                    held if held < final else final)  # noqa: FURB136
                seq.held = held = new_held
            call_at = held
            if caching:
                fill_at = ((c + 1) // bs + 1) * bs - 1
                if fill_at < held:
                    call_at = fill_at
            seq.call_at = call_at
            key = (last if last < call_at else call_at) - base  # noqa: FURB136
            bucket = buckets.get(key)
            if bucket is None:
                buckets[key] = [(seq, seq.gen)]
            else:
                bucket.append((seq, seq.gen))
        return True

    # ---- quiet steps in one go -------------------------------------------------------------

    def coast(self, now: float, horizon: float, model: StepModel, log: RunLog) -> float | None:
        """Run the *quiet* steps from ``now`` at once; when the last one ends (None: none ran).

        A quiet step is one the reference loop would run with only steady sequences and no
        waiting ones, every due ``allocate_slots`` call sure to succeed, and any sequence
        whose last token is due needing no call (it then finishes at the step's end). Its
        batch is the steady set, so its time is the step model's for that set, and its calls,
        frees, memory snapshot and row (appended to ``log.steps``) are exactly the reference
        step's. Steps are taken up to the first that ends after ``horizon`` (the next
        arrival: the waiting queue stays empty while they are planned, and the arrival comes
        before the engine resumes, as it would step by step; a step ending exactly at it stops
        coasting, since their order would then depend on event ids) and none ends after ``2 *
        now``: then ``now + (end - now)`` is exactly ``end`` (Sterbenz), so the one timeout
        the engine yields lands on the time that step-by-step timeouts would have reached.
        """
        n = self.num_steady
        if (self.active or self.waiting or self.swapped or not n or self.record_log
                or n > self.config.max_num_batched_tokens):
            return None
        last_end = 2 * now
        steps = log.steps
        snapshot = self.tally.snapshot
        first = self.step_index
        t = now
        while n:
            k = self.step_index
            st = model.predict_split(n, self.steady_base + n * k, ())
            attention, linear, overhead = st
            duration = attention + linear + overhead + 0.0
            end = t + duration
            if end > last_end or end == horizon:
                break
            bucket = self.buckets.get(k)
            if bucket is None:
                self.step_index = k + 1
            else:
                quiet = self._quiet_calls(bucket, k)
                if quiet is None:
                    break
                del self.buckets[k]
                if quiet[1]:
                    self._finishing_step(quiet[0], quiet[1], st, t, duration, log)
                    n = self.num_steady
                    t = end
                    if end > horizon:
                        break
                    continue
                self._steady_calls(quiet[0], None)  # cannot fail: checked by _quiet_calls
                self.step_index = k + 1
            steps.append((k, t, duration, attention, linear, overhead, 0.0,
                          len(self.running), self.num_running_groups, 0, 0, n, 0, n,
                          *snapshot(self.active_computed + self.steady_base + n * (k + 1)),
                          0, 0, 0, 0, 0, 0))
            t = end
            if end > horizon:
                break
        if self.step_index == first:
            return None
        self.num_coasted += self.step_index - first
        return t

    def after_coast(self, log: RunLog) -> None:
        """Once the engine has resumed at the end of the coasted steps: the last step's row
        counts the requests that arrived during it, as a row taken step by step would."""
        row = log.steps[-1]
        log.steps[-1] = (*row[:_WAITING], self.num_waiting(), *row[_WAITING + 1:])

    def _finishing_step(self, due: list[Seq], finishing: list[Seq], st: StepTime,
                        start: float, duration: float, log: RunLog) -> None:
        """A quiet step in which the ``finishing`` sequences compute their last token: they
        wake and are planned as the reference loop plans them (no call), the due calls run in
        running order, and the reference ``apply`` and row close the step."""
        k = self.step_index
        self.num_coasted_finishing += 1
        for seq in finishing:
            self._wake(seq)
        # Planning a woken sequence touches no manager state, so the calls can go first.
        self._steady_calls(due, None)  # cannot fail: checked by _quiet_calls
        plan = StepPlan(self.config.max_num_batched_tokens)
        for seq in sorted(finishing, key=_by_key):
            plan.add(seq, 1, seq.req.num_computed_tokens)
        plan.num_steady = self.num_steady
        plan.steady_context = self.steady_base + self.num_steady * k
        plan.budget -= self.num_steady
        self.apply(plan, start + duration, start)
        record_step(log, self, plan, st, start, duration, 0.0, self.snapshot())

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
        if need > self.free_queue.num_free_blocks:
            return None
        if len(due) > 1:
            due.sort(key=_by_key)
        return due, finishing

    def can_skip(self, seq: Seq, n: int) -> bool:
        return n == 1 and seq.req.num_computed_tokens < seq.call_at

    def after_allocate(self, seq: Seq, n: int) -> None:
        bs = self.block_size
        c = seq.req.num_computed_tokens
        end = min(c + n, self.config.max_model_len)
        self.tally.set_held(seq, max(seq.held, -(-end // bs) * bs))
        seq.call_at = min(seq.held, (end // bs + 1) * bs - 1) if self.caching else seq.held

    def after_admit(self, seq: Seq, hit: int, n: int) -> None:
        if not isinstance(seq.req, SimRequest):
            raise TypeError(f"{seq.request_id}: the fast path needs SimRequest requests")
        self.active[seq.key] = seq
        self.active_computed += hit
        self.after_allocate(seq, n)

    def leave_running(self, seq: Seq) -> None:
        super().leave_running(seq)
        if seq.steady:
            self._wake(seq)
        if self.active.pop(seq.key, None) is not None:
            self.active_computed -= seq.req.num_computed_tokens

    def on_freed(self, seq: Seq) -> None:
        self.tally.set_held(seq, 0)
        seq.call_at = -1

    # ---- after the step ------------------------------------------------------------------

    def apply(self, plan: StepPlan, now: float, start: float) -> None:
        for seq, n in zip(plan.seqs, plan.tokens):
            if seq.status == RUNNING:
                self.active_computed += n
        super().apply(plan, now, start)
        for seq in plan.seqs:
            if seq.status == RUNNING and not seq.steady and seq.key in self.active:
                self._settle(seq)

    def snapshot(self) -> tuple[int, ...]:
        """The memory snapshot after the step just applied (see ``sim/tally.py``)."""
        computed = self.active_computed + self.steady_base + self.num_steady * self.step_index
        return self.tally.snapshot(computed)

    def materialize(self) -> None:
        """Write every steady sequence's state back into its request (for --debug checks);
        a steady sequence past its next event means an event was lost."""
        for seq in self.running.values():
            if seq.steady:
                c = seq.base + self.step_index
                event = min(seq.call_at, seq.last_c)
                if c > event:
                    raise AssertionError(f"{seq.request_id}: steady at {c} past its event {event}")
                seq.req.num_computed_tokens = c
                seq.num_out = c + 1 - seq.num_prompt
                seq.flush()
