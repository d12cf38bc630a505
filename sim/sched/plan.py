"""One step's schedule: which sequences run, with how many new tokens, and what else happened.

The scheduler fills a ``StepPlan``; the engine prices it with the step-time model and hands it
back to the scheduler to apply once the step's time has passed. Steady decodes of the fast
path are not listed one by one, only counted (``num_steady``, ``steady_context``).
"""
from __future__ import annotations

from typing import Any

from sim.workload.sequence import Seq


class StepPlan:
    """A step's work. ``seqs[i]`` computes ``tokens[i]`` new tokens after ``contexts[i]``."""

    __slots__ = (
        "_split",
        "budget",
        "contexts",
        "draft_slots",
        "events",
        "num_copies",
        "num_preemptions",
        "num_steady",
        "outcome",
        "overlapped",
        "padded",
        "preempted",
        "prefix_hits",
        "prefix_queries",
        "seqs",
        "steady_context",
        "swap_in_blocks",
        "swap_out_blocks",
        "tokens",
    )

    def __init__(self, budget: int, seqs: list[Seq] | None = None,
                 tokens: list[int] | None = None, contexts: list[int] | None = None,
                 num_steady: int = 0, steady_context: int = 0, draft_slots: int = 0) -> None:
        self.draft_slots = draft_slots
        """Input slots each scheduled sequence also takes for drafting (0.33's budget)."""
        self.budget = budget - draft_slots
        """Tokens the next sequence may still get: the token budget less the drafting slots
        of the sequences scheduled so far and of that next one."""
        self.seqs: list[Seq] = seqs if seqs is not None else []
        self.tokens: list[int] = tokens if tokens is not None else []
        self.contexts: list[int] = contexts if contexts is not None else []
        self.num_steady = num_steady
        self.steady_context = steady_context
        self.preempted = False
        self.num_preemptions = 0
        self.swap_out_blocks = 0
        self.swap_in_blocks = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.num_copies = 0
        self.events: dict[str, list[Any]] | None = None
        self.outcome: dict[Seq, int] | None = None
        """Spec decoding or async: each sequence's drafts if the step samples it, else -1."""
        self.overlapped = False
        """Scheduled while the step before it ran (async scheduling)."""
        self.padded: set[Seq] | frozenset[Seq] = frozenset()
        """Spec decoding: sequences whose drafts are placeholders (always rejected)."""
        self._split: tuple[int, int, list[tuple[int, int]], int] | None = None

    def add(self, seq: Seq, num_tokens: int, context: int) -> None:
        """Schedule ``seq`` for ``num_tokens`` new tokens."""
        self.seqs.append(seq)
        self.tokens.append(num_tokens)
        self.contexts.append(context)
        self.budget -= num_tokens + self.draft_slots

    def remove(self, seq: Seq) -> None:
        """Take a scheduled sequence back out (it was preempted later in the same step)."""
        for i, other in enumerate(self.seqs):
            if other is seq:
                self.budget += self.tokens[i] + self.draft_slots
                del self.seqs[i], self.tokens[i], self.contexts[i]
                return

    @property
    def empty(self) -> bool:
        return not self.seqs and self.num_steady == 0

    def note(self, kind: str, record: Any) -> None:
        """Remember an event for the allocation log (only when a log is being recorded)."""
        if self.events is not None:
            self.events.setdefault(kind, []).append(record)

    def split(self) -> tuple[int, int, list[tuple[int, int]], int]:
        """(decodes, their context sum, prefill (new, context) chunks, total new tokens);
        computed once, when the schedule is final."""
        if self._split is not None:
            return self._split
        num_decode, decode_context = self.num_steady, self.steady_context
        prefills = []
        for n, c in zip(self.tokens, self.contexts):
            if n == 1:
                num_decode += 1
                decode_context += c
            else:
                prefills.append((n, c))
        total = self.num_steady + sum(self.tokens)
        self._split = (num_decode, decode_context, prefills, total)
        return self._split
