"""vLLM v1's scheduling policy over any KV manager (``../shared/docs/vllm_kv_semantics.md`` s.8).

Each step: (1) running sequences in running order, while the token budget lasts, each asking
``allocate_slots`` for its new tokens; when that returns None the *last* running sequence
(FCFS; under priority the policy's victim, ``policy.py``) is preempted (and the request
retried) until it succeeds or the request preempts itself;
(2) only if nothing was preempted: swapped-out groups come back (swap mode), then waiting
requests are admitted in FCFS order. After the step each sequence's computed count grows by
its new tokens; one that caught up samples a token, and finishes when it has its output
length. ``Scheduler`` composes its parts over one shared state (``state.py``): admission,
preemption and sampling. The *reference loop* visits every running sequence every step; with
the fast path the scheduler owns a steady set (``steady.py``) that derives the same results
without visiting steady decodes, and a coaster (``coast.py``) for runs of quiet steps (under
async scheduling too).
"""
from __future__ import annotations

from collections.abc import Callable

from allocator.interface import KVManager
from sim.config import RunConfig
from sim.cost.step_base import StepModel, StepTime
from sim.results.metrics import RunLog, step_row
from sim.sched.admission import Admission
from sim.sched.async_sched import make_extras, step_tokens
from sim.sched.coast import Coaster
from sim.sched.plan import StepPlan
from sim.sched.policy import pick_victim, prefill_cap
from sim.sched.preemption import Preemption
from sim.sched.sampling import Sampling
from sim.sched.state import SchedState
from sim.sched.steady import SteadySet
from sim.sched.tally import snapshot_row
from sim.workload.sequence import REJECTED, RUNNING, Group, Seq
from sim.workload.workload import Workload


class SimulationError(RuntimeError):
    """A run broke an invariant (a leak, a failed check): a bug, not bad input."""


class Scheduler:
    """Continuous batching with preemption (see the module docstring).

    Args:
        manager: the KV-cache manager of this run.
        config: the run's configuration.
        workload: builds the requests' sequences.
        log: receives the step rows and the requests that leave.
        fast: use the fast path (check ``uses_fast_path`` first).
        independent: every sample and beam is its own sequence (contiguous managers).
        request_batching: FasterTransformer-style batches (see ``Admission``).
        can_ever_fit: an up-front check rejecting requests the empty pool cannot hold.
    """

    def __init__(self, manager: KVManager, config: RunConfig, workload: Workload, log: RunLog,
                 *, fast: bool = False, independent: bool = False,
                 request_batching: bool = False,
                 can_ever_fit: Callable[[Group], bool] | None = None) -> None:
        self.state = state = SchedState(manager, config, workload)
        self.manager = manager
        self.log = log
        self.max_model_len = config.scheduler.max_model_len
        fanout = config.scheduler.sampling_mode == "fanout"
        self.admission = Admission(
            state, split=lambda group: independent or (fanout and group.beam_width == 1),
            request_batching=request_batching, can_ever_fit=can_ever_fit)
        self.preemption = Preemption(state)
        profile = config.scheduler.vllm_profile
        self.policy = config.scheduler.scheduling_policy
        self.continue_after_self_preemption = (self.policy == "priority"
                                               and profile.priority_self_preemption_continue)
        self.sampling = Sampling(state)
        self.extras = make_extras(state, workload, fanout, config.cache.block_size)
        self.steady: SteadySet | None = None
        self.coaster: Coaster | None = None
        self.skips_calls = False
        """Whether a one-token call before ``call_at`` is skipped (the paged fast path)."""
        if fast:
            self.steady = SteadySet(state, config.cache.block_size, self.extras)
            self.coaster = Coaster(self.steady, log, self.complete)
            state.tracker = self.steady
            state.eager_append = False
            self.skips_calls = self.steady.tally.skips_calls
        state.on_finish = state.on_reject = log.add_group
        if self.extras is not None and self.extras.pads:
            self.admission.pad = self.extras.pad_drafts
        lookahead = self.extras.lookahead if self.extras is not None else 0
        # allocate_slots' keywords, built once: draft slots where spec decoding reserves them
        self._slot_kwargs = {"num_lookahead_tokens": lookahead} if lookahead else {}

    @property
    def step_index(self) -> int:
        """Steps applied so far."""
        return self.state.step_index

    def has_work(self) -> bool:
        """Whether anything is waiting, running or swapped out."""
        state = self.state
        return bool(state.waiting or state.swapped or state.running)

    def marker(self) -> tuple[int, ...]:
        """Changes whenever scheduling might give another answer (the engine retries a step
        that scheduled nothing until this stops changing)."""
        state = self.state
        return (state.epoch, len(state.waiting), len(state.swapped), len(state.running),
                len(self.log.groups))

    def schedule(self, now: float) -> StepPlan | None:
        """Plan the next step at time ``now``; None when nothing can run."""
        state = self.state
        plan = StepPlan(state.config.max_num_batched_tokens,
                        draft_slots=state.config.draft_slots)
        if state.record_log:
            plan.events = {}
        state.now = now
        state.prefill_cap = prefill_cap(state.config, len(state.running) + len(state.waiting))
        if self.steady is None:
            self._run_seqs(plan, list(state.running.values()))
        else:
            self.steady.after_run(plan, self._run_seqs(plan, self.steady.order(plan.budget)))
        if not plan.preempted:
            self.preemption.resume_swapped(plan)
            if not state.swapped:
                self.admission.admit(plan)
        self._take_copies(plan)
        if plan.empty:
            return None
        if self.extras is not None:
            self.extras.launch(plan)
            if self.steady is not None:
                self.steady.launched(plan)
        return plan

    def _run_seqs(self, plan: StepPlan, seqs: list[Seq]) -> int | None:
        """Schedule ``seqs`` (running order) while budget lasts; the key that stopped it, if
        any. A steady sequence makes its call in place and stays steady. Under priority from
        0.33 a sequence that preempted itself lets the ones behind it run (else it stops)."""
        steady = self.steady
        for seq in seqs:
            if seq.steady and steady is not None and steady.call(seq):
                continue
            if plan.budget > 0 and seq.status == RUNNING and not self._run_one(seq, plan) \
                    and not self.continue_after_self_preemption:
                return seq.key
        return None

    def _run_one(self, seq: Seq, plan: StepPlan) -> bool:
        """The reference loop's body for one sequence; False if it preempted itself. The fast
        path skips a paged one-token call that provably changes nothing (before ``call_at``)."""
        c = seq.req.num_computed_tokens
        budget = plan.budget
        cap = self.state.prefill_cap
        if cap < budget:  # noqa: PLR1730 - a comparison, not min(): runs for every sequence
            budget = cap
        n = step_tokens(self.extras, seq, c, budget, self.max_model_len)
        if n <= 0:
            return True
        if (n != 1 or not self.skips_calls or c >= seq.call_at) \
                and not self._allocate_running(seq, c, n, plan):
            return False
        plan.add(seq, n, c)
        return True

    def _allocate_running(self, seq: Seq, c: int, n: int, plan: StepPlan) -> bool:
        """allocate_slots for a running sequence, preempting the policy's victim (the last
        one, FCFS) until it fits.

        Returns False when ``seq`` itself was preempted.
        """
        state = self.state
        seq.flush()
        while self.manager.allocate_slots(seq.req, n, **self._slot_kwargs) is None:
            victim = pick_victim(state.running, self.policy)
            self.preemption.preempt(victim, plan)
            if seq.status != RUNNING:
                if not state.running and all(g is seq.group for g in state.swapped):
                    state.abandon(seq.group)
                return False
            seq.flush()
        state.allocated(seq, n)
        return True

    def complete(self, plan: StepPlan, st: StepTime, start: float, duration: float,
                 swap_s: float) -> None:
        """The end of a step that ran from ``start`` for ``duration``: apply it, record it."""
        self.apply(plan, start + duration, start)
        state = self.state
        num_decode, _, prefills, total = plan.split()
        self.log.steps.append(step_row(
            state.step_index - 1, start, duration, st.attention_s, st.linear_s, st.overhead_s,
            swap_s, len(state.running), state.num_running_groups, state.num_waiting(),
            len(state.swapped), num_decode + len(prefills), total - num_decode, num_decode,
            self.snapshot(), (plan.prefix_queries, plan.prefix_hits, plan.num_preemptions,
                              plan.num_copies, plan.swap_out_blocks, plan.swap_in_blocks),
            int(plan.overlapped)))

    def apply(self, plan: StepPlan, now: float, start: float) -> None:
        """Advance every scheduled sequence by its tokens; sample, finish and fork."""
        state = self.state
        state.now = now
        steady = self.steady
        if self.extras is not None:
            self.extras.apply(plan, start, self._sample,
                              steady.take_owed() if steady is not None else ())
            state.step_index += 1
            if steady is not None:
                steady.after_apply(plan)
            return
        if steady is not None:
            steady.counted(plan)
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
                self._sample(seq, plan)
                if group.forked and group.beam_width > 1 and group.status == RUNNING:
                    touched.append(group)
        for group in dict.fromkeys(touched):
            self.sampling.beam_step(group, plan)
        state.step_index += 1
        if steady is not None:
            steady.after_apply(plan)

    def _sample(self, seq: Seq, plan: StepPlan) -> None:
        """The sequence caught up: it samples one token (forking first if it must)."""
        state = self.state
        group = seq.group
        if seq.pending_fork:
            seq.pending_fork = False
            self.sampling.fork_after_prefill(seq, plan)
        seq.num_out += 1
        if state.eager_append:
            seq.flush()
        if group.first_token is None:
            group.first_token = state.now
        if seq.num_out >= group.output_len:
            state.finish_seq(seq, plan)

    def _take_copies(self, plan: StepPlan) -> None:
        copies = self.manager.take_copy_plan()
        if copies:
            plan.num_copies += len(copies)
            self.state.num_cow_copies += len(copies)
            if plan.events is not None:
                plan.events.setdefault("copies", []).extend(copies)

    def snapshot(self) -> tuple[int, ...]:
        """The memory snapshot after the step, as a tuple in STEP_COLUMNS order."""
        if self.steady is not None:
            return self.steady.snapshot()
        return snapshot_row(self.manager.memory_snapshot())

    def coast(self, now: float, horizon: float, model: StepModel) -> float | None:
        """Run the quiet steps from ``now`` at once (fast path only; see ``coast.py``)."""
        return self.coaster.coast(now, horizon, model) if self.coaster is not None else None

    def give_up(self) -> None:
        """End of trace with requests that can no longer be scheduled: reject them."""
        state = self.state
        groups = [g for g in state.swapped] + [s.group for s in state.running.values()]
        for seq in list(state.running.values()):
            state.leave_running(seq)
        for entry in state.waiting:
            groups.append(entry if isinstance(entry, Group) else entry[0].group)
        state.waiting.clear()
        state.swapped.clear()
        for group in dict.fromkeys(groups):
            if group.status in (REJECTED, "finished"):
                continue
            for seq in group.seqs:
                self.manager.free(seq.req)
            group.reject_reason = "unschedulable"
            state.reject(group)

    def check(self) -> None:
        """--debug: invariants after every step; the fast snapshot must equal the real one."""
        if self.steady is not None:
            fast = self.steady.snapshot()
            self.steady.materialize()
            real = snapshot_row(self.manager.memory_snapshot())
            if real != fast:
                raise SimulationError(f"step {self.step_index - 1}: fast snapshot {fast} != "
                                      f"memory_snapshot() {real}")
        self.manager.check_invariants()
