"""Async scheduling and the step bookkeeping speculative decoding shares with it.

With async scheduling (vLLM v1's ``AsyncScheduler``) the engine schedules step t+1 while
step t runs: a scheduled step is *launched* at once (computed tokens advance, as vLLM's
``_update_after_schedule`` does) and a sampling sequence holds output placeholders
(``1 + drafts``) until step t's outputs are applied. A running sequence then asks for
``num_tokens + drafts + placeholders - computed`` tokens; one whose in-flight step is sure to
reach its output length (all drafts rejected) is not scheduled again. ``num_in_flight_tokens``
counts the scheduled tokens not yet applied (the manager's sliding-window frees read it where
the release says). A sequence preempted while its step is in flight still gets that output
(vLLM delivers stale output) and may finish in the waiting queue; it is re-admitted only
after that (in this model the output is always applied before the next admission, so vLLM's
skip of undelivered preempted requests has nothing left to skip).
A running sequence's output caches the blocks it completes as it arrives (vLLM's
``cache_blocks`` in ``update_from_output``), before a finished sequence is freed: under async
scheduling in every release, for speculative decoding too where the profile's
``output_caching`` says so (0.33).
Without async the same bookkeeping runs at apply time, for speculative decoding alone.
``step_tokens`` is the one rule for a running sequence's tokens in a step (the reference loop
and the fast path's steady set both count with it).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from allocator.request import Request
from sim.config import InputError
from sim.sched.plan import StepPlan
from sim.sched.spec import SpecDecode
from sim.sched.state import SchedState, num_new_tokens
from sim.workload.sequence import FINISHED, RUNNING, WAITING, Seq
from sim.workload.workload import Workload

Sample = Callable[[Seq, StepPlan], None]


def step_tokens(extras: StepExtras | None, seq: Seq, computed: int, budget: int,
                max_model_len: int) -> int:
    """Tokens a running sequence with ``computed`` tokens asks for in the next step: 0 once
    its step in flight reaches the output length, else ``num_new_tokens`` past its
    placeholders and drafts."""
    if extras is None:
        return num_new_tokens(seq.num_tokens, computed, budget, max_model_len)
    if extras.done_in_flight(seq):
        return 0
    return num_new_tokens(seq.num_tokens + extras.extra(seq, computed), computed, budget,
                          max_model_len)


class StepExtras:
    """Drafts, placeholders and in-flight steps of one scheduler (spec decoding, async)."""

    def __init__(self, state: SchedState, spec: SpecDecode | None, overlap: bool) -> None:
        self.state = state
        self.spec = spec
        self.overlap = overlap
        self.placeholders: dict[Seq, int] = {}
        self.pads = spec is not None and state.config.vllm_profile.draft_padding != "none"
        """Whether admission asks ``pad_drafts`` (the release pads drafts)."""
        self.padding: set[Seq] = set()
        """Sequences given placeholder drafts while this step is scheduled."""
        self.lookahead = spec.lookahead if spec is not None else 0
        self.num_overlapped = 0
        self.num_tokens = 0
        caches = overlap or (spec is not None
                             and state.config.vllm_profile.output_caching == "async_or_spec")
        self._cache_blocks: Callable[[Request, int], None] | None = \
            getattr(state.manager, "cache_blocks", None) if caches else None

    def extra(self, seq: Seq, computed: int) -> int:
        """Tokens past ``seq.num_tokens`` the next step may compute: placeholders + drafts."""
        held = self.placeholders.get(seq, 0)
        spec = self.spec
        if spec is None:
            return held
        if held:
            return held + spec.k
        return spec.drafts(seq, computed)

    def pad_drafts(self, seq: Seq, computed: int, plan: StepPlan, num_running: int) -> int | None:
        """Placeholder drafts for a waiting ``seq`` with one token left (vLLM pads such a
        request to ``1 + K`` tokens for a uniform decode batch; the drafts are always
        rejected): K, 0, or None when admission must stop. ``num_running``: the entries of
        ``plan`` scheduled by the running loop."""
        spec, mode = self.spec, self.state.config.vllm_profile.draft_padding
        assert spec is not None
        running = plan.seqs[:num_running]
        # a prefill chunk ran: a sequence whose last scheduled step did not sample (under
        # async that step may be in flight, sampling into its placeholders)
        if any(other not in spec.drafting and not self.placeholders.get(other)
               for other in running):
            return 0
        padded, limit = 1 + spec.k, self.state.config.max_model_len
        if mode == "with_running":
            if not running:
                return 0
            if padded > plan.budget or computed + padded > limit:
                return None
        else:
            if not running and computed == 0 or computed + padded + 1 > limit:
                return 0
            if padded > plan.budget:
                return None
        self.padding.add(seq)
        return spec.k

    def done_in_flight(self, seq: Seq) -> bool:
        """The step in flight reaches the output length even if all its drafts fail."""
        held = self.placeholders.get(seq, 0)
        return held > 0 and seq.req.num_computed_tokens + 2 - held \
            >= seq.num_prompt + seq.group.output_len

    def launch(self, plan: StepPlan) -> None:
        """A step is scheduled: each sequence's drafts and whether it samples; with async
        the step is in flight at once (computed tokens and placeholders advance)."""
        outcome: dict[Seq, int] = {}
        plan.outcome = outcome
        if self.padding:
            plan.padded = self.padding.intersection(plan.seqs)
            self.padding = set()
        self.num_tokens += sum(plan.tokens) + plan.num_steady
        spec = self.spec
        for seq, n, c in zip(plan.seqs, plan.tokens, plan.contexts):
            held = self.placeholders.get(seq, 0)
            target = seq.num_tokens + held
            drafts = max(0, c + n - target)
            outcome[seq] = drafts if c + n >= target else -1
            if spec is not None and self.lookahead:
                blocks = len(self.state.manager.get_block_ids(seq.request_id)[0])
                spec.lookahead_blocks += spec.held(blocks, c + n)
            if self.overlap:
                seq.req.num_computed_tokens += n
                seq.req.num_in_flight_tokens += n
                if c + n >= target:
                    self.placeholders[seq] = held + 1 + drafts

    def apply(self, plan: StepPlan, start: float, sample: Sample,
              owed: Iterable[Seq] = ()) -> None:
        """A step's outputs: roll back rejected drafts, sample accepted + bonus tokens. The
        fast path's steady sequences are skipped (their counts follow from the step index);
        ``owed`` are sequences woken while the step ran: it held one token of each, sampling."""
        outcome = plan.outcome
        assert outcome is not None
        self.num_overlapped += plan.overlapped
        for seq, n in zip(plan.seqs, plan.tokens):
            if not seq.steady:
                self._apply_one(seq, n, outcome[seq], start, sample, plan)
        for seq in owed:
            self._apply_one(seq, 1, 0, start, sample, plan)

    def _apply_one(self, seq: Seq, n: int, drafts: int, start: float, sample: Sample,
                   plan: StepPlan) -> None:
        """One sequence's output of the step: ``n`` tokens, ``drafts`` (-1: no sample)."""
        req = seq.req
        if self.overlap:
            req.num_in_flight_tokens -= n
            if drafts >= 0 and seq in self.placeholders:
                self._release(seq, 1 + drafts)
        else:
            req.num_computed_tokens += n
        if seq.status == WAITING and drafts >= 0:
            self._stale(seq, self._accept(seq, drafts, plan))
            return
        if seq.status != RUNNING:
            return
        if self.spec is not None:
            self.spec.stepped(seq, drafts >= 0)
        if drafts < 0:
            return
        accepted = self._accept(seq, drafts, plan)
        req.num_computed_tokens -= drafts - accepted
        if seq.group.first_scheduled is None:
            seq.group.first_scheduled = start
        seq.num_out = min(seq.num_out + accepted, seq.group.output_len - 1)
        if self._cache_blocks is not None:
            self._cache_output(seq)
        sample(seq, plan)

    def _cache_output(self, seq: Seq) -> None:
        """Append the output's tokens (accepted drafts and the sampled one) and cache the
        blocks they complete: computed tokens less those in flight, and never the last token
        (vLLM trims the computed count of a request that stops inside its drafts)."""
        req = seq.req
        req.append_output_token_ids(seq.out_ids[req.num_output_tokens:seq.num_out + 1])
        assert self._cache_blocks is not None
        self._cache_blocks(req, min(req.num_computed_tokens - req.num_in_flight_tokens,
                                    req.num_tokens - 1))

    def _accept(self, seq: Seq, drafts: int, plan: StepPlan) -> int:
        spec = self.spec
        if spec is None or not drafts:
            return 0
        if seq in plan.padded:
            spec.count(drafts, 0)
            return 0
        return spec.accept(seq, drafts)

    def _release(self, seq: Seq, count: int) -> None:
        left = self.placeholders[seq] - count
        if left > 0:
            self.placeholders[seq] = left
        else:
            del self.placeholders[seq]

    def _stale(self, seq: Seq, accepted: int) -> None:
        """Output of a step in flight when ``seq`` was preempted: delivered all the same."""
        group = seq.group
        seq.num_out = min(seq.num_out + accepted + 1, group.output_len)
        if seq.num_out < group.output_len:
            return
        state = self.state
        for entry in state.waiting:
            if isinstance(entry, list) and seq in entry:
                entry.remove(seq)
                if not entry:
                    state.waiting.remove(entry)
                break
        seq.status = FINISHED
        group.num_live -= 1
        if group.num_live == 0 and group.status == RUNNING:
            group.status = FINISHED
            group.finish = state.now
            state.on_finish(group)

    def summary(self, num_steps: int) -> dict[str, float | int]:
        """Counters of the run: overlapped steps, tokens per step, the drafts' figures."""
        figures: dict[str, float | int] = {
            "num_overlapped_steps": self.num_overlapped,
            "tokens_per_step": self.num_tokens / num_steps if num_steps else 0.0}
        if self.spec is not None:
            figures.update(self.spec.summary(num_steps, self.num_tokens))
        return figures

    def admitted(self, seq: Seq, hit: int) -> None:
        """Nothing to do (``Tracker`` protocol)."""

    def allocated(self, seq: Seq, num_tokens: int) -> None:
        """Nothing to do (``Tracker`` protocol)."""

    def freed(self, seq: Seq) -> None:
        """Nothing to do (``Tracker`` protocol)."""

    def left(self, seq: Seq) -> None:
        """The sequence left the running order (preempted or finished): no placeholders."""
        self.placeholders.pop(seq, None)
        if self.spec is not None:
            self.spec.forget(seq, seq.num_out >= seq.group.output_len)


def make_extras(state: SchedState, workload: Workload, fanout: bool,
                block_size: int) -> StepExtras | None:
    """Spec decoding and async scheduling's bookkeeping, if either is on (it becomes the
    state's tracker). Requests that fork (cow samples, beams) are scheduled synchronously;
    spec decoding refuses them."""
    config = state.config
    forks = any(width > 1 or (n > 1 and not fanout)
                for n, width in zip(workload.n, workload.beam_width))
    spec = (SpecDecode(config, state.seed, block_size, workload.acceptance_rates)
            if config.spec is not None else None)
    if spec is not None and forks:
        raise InputError("--speculative-config: requests with n > 1 or beam search are not "
                         "simulated with speculative decoding (use --sampling-mode fanout)")
    if spec is None and not (config.async_scheduling and not forks):
        return None
    extras = StepExtras(state, spec, config.async_scheduling and not forks)
    state.tracker = extras
    return extras
