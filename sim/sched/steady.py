"""The fast path's steady set: decoding sequences the running loop need not visit.

A *steady* sequence (caught up, decoding, next call or finish still ahead) advances one
token per step with no work at all: its computed count is ``base + step``, and it sleeps in
a bucket keyed by the step of its next event (a manager call, or its last token). Steps sum
the steady contexts from running totals, and the memory snapshot comes from the manager's
tally (``sim/sched/tally.py``), which also says which calls may be skipped or deferred:
paged managers skip one-token calls that need no new block and fill none, contiguous ones
defer a steady sequence's calls and replay the last one when it wakes. A step whose token
budget cannot cover everyone (a long prefill chunk) wakes every steady sequence, since then
running order decides who is served. Every count the reference loop computes (tokens per
step, held slots and the next call after an allocation) goes through the same functions.
Under async scheduling (``async_sched.py``) computed counts grow when a step is launched, so
the step clock counts launches, and a steady sequence holds one placeholder and one token in
flight (``lag``); one woken while the step it was counted in runs is *owed* that step's
output, which the scheduler applies with the listed ones (``StepExtras.apply``).
Tests compare every output byte with the reference loop (``SchedulerConfig.fast = False``).
Used for full attention, recompute preemption, no forks and no speculative decoding, with
the paged manager or a contiguous one.
"""
from __future__ import annotations

import sys
from operator import attrgetter

from allocator.contiguous import ContiguousManager
from allocator.paged import PagedKVCacheManager
from sim.sched.async_sched import StepExtras, step_tokens
from sim.sched.plan import StepPlan
from sim.sched.state import SchedState
from sim.sched.tally import ContiguousTally, PagedTally, Snapshot
from sim.workload.sequence import RUNNING, Seq
from sim.workload.sim_request import SimRequest

by_key = attrgetter("key")
"""Running order (a C-level key function: sorts run at every step)."""


class SteadySet:
    """Steady and active sequences of a fast-path scheduler (a ``Tracker`` of its state).

    Invariants: every running sequence is either steady (in a bucket at the step of its next
    event, ``req.num_computed_tokens`` stale, ``base + clock`` its count) or active (in
    ``active``, counts current); ``active_computed`` sums the active ones' computed tokens
    and ``steady_base`` the steady ones' bases.
    """

    def __init__(self, state: SchedState, block_size: int,
                 extras: StepExtras | None = None) -> None:
        manager = state.manager
        self.state = state
        self.block_size = block_size
        self.max_model_len = state.config.max_model_len
        if extras is not None and (extras.spec is not None or not extras.overlap):
            raise ValueError("the fast path does not follow speculative decoding")
        self.extras = extras
        self.lag = 1 if extras is not None else 0
        """Outputs a steady sequence has in flight: its placeholders (1 under async)."""
        self.num_launched = 0
        """Steps launched (async: their tokens are computed at launch)."""
        self.fresh: set[Seq] = set()
        """Settled since the last launch: listed in the step in flight."""
        self.owed: list[Seq] = []
        self.tally: PagedTally | ContiguousTally
        if isinstance(manager, PagedKVCacheManager) and not manager.has_forked:
            self.tally = PagedTally(manager, block_size, self.max_model_len)
        elif isinstance(manager, ContiguousManager):
            self.tally = ContiguousTally(manager, self.lag)
        else:
            raise ValueError("the fast path needs a contiguous or an unforked paged manager")
        # The tally's own methods answer these (no call layer on the hot path).
        self.allocated = self.tally.allocated
        self.freed = self.tally.freed
        self.append_slots = self.tally.append_slots
        self.buckets: dict[int, list[tuple[Seq, int]]] = {}
        self.active: dict[int, Seq] = {}
        self.active_computed = 0
        self.num_steady = 0
        self.steady_base = 0

    # ---- the sequences' life cycle (Tracker) ---------------------------------------------

    def admitted(self, seq: Seq, hit: int) -> None:
        if not isinstance(seq.req, SimRequest):
            raise TypeError(f"{seq.request_id}: the fast path needs SimRequest requests")
        self.active[seq.key] = seq
        self.active_computed += hit

    def left(self, seq: Seq) -> None:
        if seq.steady:
            self.wake(seq)
        if self.active.pop(seq.key, None) is not None:
            self.active_computed -= seq.req.num_computed_tokens
        if self.extras is not None:
            self.extras.left(seq)

    @property
    def clock(self) -> int:
        """Steps whose tokens the computed counts hold: applied ones, or launched (async)."""
        return self.num_launched if self.lag else self.state.step_index

    def restore(self, seq: Seq, computed: int) -> None:
        """Write a steady sequence's counts back into it: ``computed`` tokens, and the
        outputs that leave it caught up (``num_tokens + lag - 1 == computed``)."""
        seq.req.num_computed_tokens = computed
        seq.num_out = computed + 1 - self.lag - seq.num_prompt

    # ---- sleeping and waking -------------------------------------------------------------

    def wake(self, seq: Seq) -> None:
        """Make a steady sequence active again, with its computed count written back."""
        c = seq.base + self.clock
        self.restore(seq, c)
        if self.lag and seq not in self.fresh:
            self.owed.append(seq)
        seq.steady = False
        seq.gen += 1
        self.num_steady -= 1
        self.steady_base -= seq.base
        self.active[seq.key] = seq
        self.active_computed += c
        self.tally.woken(seq, c)

    def settle(self, seq: Seq) -> None:
        """After a step (step_index already counts it), put a caught-up decoding sequence to
        sleep until its next event. Caught up: it asks one token per step from now on; under
        async with one placeholder and one token in flight (a decode's)."""
        c = seq.req.num_computed_tokens
        if seq.status != RUNNING or seq.num_out == 0 or seq.call_at <= c or seq.last_c <= c:
            return
        if step_tokens(self.extras, seq, c, sys.maxsize, self.max_model_len) != 1:
            return
        if self.extras is not None and (self.extras.placeholders.get(seq) != 1
                                        or seq.req.num_in_flight_tokens != 1):
            return
        seq.base = c - self.clock
        if self.lag:
            self.fresh.add(seq)
        seq.steady = True
        del self.active[seq.key]
        self.active_computed -= c
        self.num_steady += 1
        self.steady_base += seq.base
        self.tally.slept(seq, c)
        self._sleep(seq)

    def _sleep(self, seq: Seq) -> None:
        """File a steady sequence under the step of its next event (a call or its last token)."""
        event = seq.call_at if seq.call_at < seq.last_c else seq.last_c  # noqa: FURB136
        key = event - seq.base
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [(seq, seq.gen)]
        else:
            bucket.append((seq, seq.gen))

    # ---- one step ------------------------------------------------------------------------

    def order(self, budget: int) -> list[Seq]:
        """The sequences the running loop visits this step, in running order: the active
        ones and the steady ones due for a call; everyone when the budget cannot serve all."""
        state = self.state
        due = self._due_now()
        want = self.num_steady
        extras = self.extras
        for seq in self.active.values():
            want += step_tokens(extras, seq, seq.req.num_computed_tokens, sys.maxsize,
                                self.max_model_len)
        if want > budget:
            for seq in [s for s in state.running.values() if s.steady]:
                self.wake(seq)
            return list(state.running.values())
        due.extend(self.active.values())
        due.sort(key=by_key)
        return due

    def _due_now(self) -> list[Seq]:
        """Steady sequences whose event is this step: a last token wakes them (the step's
        results must be applied to them); a manager call is made in running order."""
        due = []
        k = self.clock
        for seq, gen in self.buckets.pop(k, ()):
            if not seq.steady or seq.gen != gen:
                continue
            if seq.base + k >= seq.last_c:
                self.wake(seq)
            else:
                due.append(seq)
        return due

    def call(self, seq: Seq) -> bool:
        """A steady sequence's one-token ``allocate_slots`` at its event; it stays steady.

        Returns False when the pool is short: the sequence is then awake, for the reference
        loop to preempt as it would.
        """
        c = seq.base + self.clock
        req = seq.req
        req.num_computed_tokens = c
        # The request's outputs are written back only when this call fills a block, the
        # one case where allocate_slots reads them (to cache the block under its hash);
        # otherwise it reads only num_computed_tokens. Other paths flush before reading.
        # It holds c + 1 - lag tokens (async: the newest is a placeholder, not cached).
        tokens = c + 1 - self.lag
        if tokens % self.block_size == 0:
            req.advance_to(tokens)  # type: ignore[attr-defined]  # a SimRequest (admitted)
        if self.append_slots(req, 1) is None:
            self.wake(seq)
            return False
        # SchedState.allocated without its dispatch (this is the hot path): the same epoch
        # and the tally's same bookkeeping as every other allocation.
        self.state.epoch += 1
        self.allocated(seq, 1)
        self._sleep(seq)
        return True

    def after_run(self, plan: StepPlan, stopped: int | None) -> None:
        """Once the running loop is done: steady sequences behind the one that stopped it
        (it preempted itself) get nothing this step; the rest decode one token each."""
        state = self.state
        if stopped is not None:
            for key in reversed(list(state.running)):
                if key < stopped:
                    break
                if state.running[key].steady:
                    self.wake(state.running[key])
        plan.num_steady = self.num_steady
        plan.steady_context = self.steady_base + self.num_steady * self.clock
        plan.budget -= self.num_steady * (1 + plan.draft_slots)

    def counted(self, plan: StepPlan) -> None:
        """The planned sequences' new tokens join the active computed count (when they join
        the computed counts: at apply, or at launch under async)."""
        for seq, n in zip(plan.seqs, plan.tokens):
            if seq.status == RUNNING:
                self.active_computed += n

    def launched(self, plan: StepPlan) -> None:
        """Async: the step is in flight, its tokens computed; the clock moves on."""
        self.counted(plan)
        self.num_launched += 1
        self.fresh.clear()

    def take_owed(self) -> list[Seq]:
        """The woken sequences owed the output of the step in flight (and forget them)."""
        owed, self.owed = self.owed, []
        return owed

    def after_apply(self, plan: StepPlan) -> None:
        """Caught-up sequences of the step go to sleep."""
        for seq in plan.seqs:
            if seq.status == RUNNING and not seq.steady and seq.key in self.active:
                self.settle(seq)

    def snapshot(self) -> Snapshot:
        """The memory snapshot after the step just applied (see ``sim/sched/tally.py``)."""
        k = self.clock
        return self.tally.snapshot(self.active_computed, self.steady_base + self.num_steady * k)

    def materialize(self) -> None:
        """Write every steady sequence's state back into its request (for --debug checks);
        a steady sequence past its next event means an event was lost."""
        for seq in self.state.running.values():
            if seq.steady:
                c = seq.base + self.clock
                event = min(seq.call_at, seq.last_c)
                if c > event:
                    raise AssertionError(f"{seq.request_id}: steady at {c} past its event {event}")
                self.restore(seq, c)
                self.tally.sync(seq, c)  # first: the replayed call sees the request unflushed
                seq.flush()
