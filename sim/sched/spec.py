"""Speculative decoding in the scheduler: drafts per step, acceptance, rollback, statistics.

A decoding sequence carries K draft tokens into its next step (as vLLM's ``spec_token_ids``),
so it asks for ``1 + K`` new tokens, within the token budget and the max-model-len clamp,
plus ``num_lookahead_tokens`` slots in ``allocate_slots``. After the step the first ``a``
drafts are accepted, each position independently with its probability given the ones before
it (a seeded generator per sequence, so the draws do not depend on the batch; a trace's
``acceptance_rate`` column gives a request its own probability at every position); the rejected
ones are rolled back (``num_computed_tokens -= rejected``), so the block hashes only ever
cover accepted tokens. The sequence gains ``a + 1`` output tokens. Drafts are proposed only
after a step in which the sequence sampled (vLLM's drafter skips a partial prefill, whose
token is discarded), so a sequence in prefill, or re-admitted after preemption (which drops
its drafts), has none until it samples, even when its last chunk leaves it one token short.
"""
from __future__ import annotations

import math
import random
import zlib

from sim.config import SchedulerConfig
from sim.workload.sequence import Seq


class SpecDecode:
    """The drafts, acceptance draws and statistics of one run."""

    def __init__(self, config: SchedulerConfig, seed: int, block_size: int,
                 row_rates: list[float] | None = None) -> None:
        assert config.spec is not None
        self.k = config.spec.k
        self.rates = config.acceptance
        self.row_rates = None if row_rates is None else [
            None if math.isnan(rate) else (rate,) * self.k for rate in row_rates]
        """Per trace row, the request's own rates (a trace column), or None for ``rates``."""
        self.lookahead = config.num_lookahead_tokens
        self.seed = seed
        self.block_size = block_size
        self._rngs: dict[tuple[str, int], random.Random] = {}
        self.num_verified = 0
        """Sequence-steps that verified drafts."""
        self.num_drafts = 0
        self.num_accepted = 0
        self.lookahead_blocks = 0
        """Blocks held only for lookahead slots, summed over steps."""
        self.drafting: set[Seq] = set()
        """Sequences whose last step sampled: they bring drafts to their next step."""

    def drafts(self, seq: Seq, computed: int) -> int:
        """Draft tokens ``seq`` brings to its next step (``computed`` of its tokens done)."""
        return self.k if seq in self.drafting and computed == seq.num_tokens - 1 else 0

    def stepped(self, seq: Seq, sampled: bool) -> None:
        """After a step of ``seq``: it has drafts for its next step iff it sampled."""
        if sampled:
            self.drafting.add(seq)
        else:
            self.drafting.discard(seq)

    def accept(self, seq: Seq, num_drafts: int) -> int:
        """How many of ``num_drafts`` verified drafts are accepted (the leading run)."""
        key = (seq.request_id, seq.sample)
        rng = self._rngs.get(key)
        if rng is None:
            name = f"{self.seed}:{seq.request_id}:{seq.sample}".encode()
            rng = self._rngs[key] = random.Random(zlib.crc32(name))
        own = self.row_rates[seq.group.index] if self.row_rates is not None else None
        rates = self.rates if own is None else own
        accepted = 0
        while accepted < num_drafts and rng.random() < rates[accepted]:
            accepted += 1
        self.count(num_drafts, accepted)
        return accepted

    def count(self, num_drafts: int, accepted: int) -> None:
        """One verification of ``num_drafts`` drafts, ``accepted`` of them accepted."""
        self.num_verified += 1
        self.num_drafts += num_drafts
        self.num_accepted += accepted

    def held(self, num_blocks: int, end: int) -> int:
        """Of the ``num_blocks`` a sequence holds after its call, those past its computed
        tokens' last block (``end`` tokens): the lookahead slots' blocks."""
        return max(0, num_blocks - -(-end // self.block_size))

    def forget(self, seq: Seq, for_good: bool) -> None:
        """The sequence left the running order: its drafts go; its generator too if it left
        for good."""
        self.drafting.discard(seq)
        if for_good:
            self._rngs.pop((seq.request_id, seq.sample), None)

    def summary(self, num_steps: int, num_tokens: int) -> dict[str, float | int]:
        """The run's speculative-decoding figures for summary.json and the table."""
        verified = self.num_verified
        return {
            "num_speculative_tokens": self.k,
            "mean_acceptance_length": 1 + self.num_accepted / verified if verified else 0.0,
            "draft_acceptance_rate": self.num_accepted / self.num_drafts
            if self.num_drafts else 0.0,
            "num_draft_tokens": self.num_drafts,
            "num_accepted_tokens": self.num_accepted,
            "mean_draft_blocks_held": self.lookahead_blocks / num_steps if num_steps else 0.0,
            "tokens_per_step": num_tokens / num_steps if num_steps else 0.0,
        }
