"""Which logged steps the executor runs: every batch shape class, capped per class and section.

A full trace has ~175,000 steps, far more than a GPU session can replay. Each step falls in a
*shape class* (its key; `bucket(x)` is the next power of two >= x, 0 for none):

    d{bucket(decodes)}-c{bucket(mean decode context)}-p{bucket(prefill tokens)}
        -x{bucket(longest cached prefix of a prefill)}[-copy][-swap]

where decodes are sequences with one new token and contexts count the tokens cached before the
step. Every step draws a priority from `random.Random(seed)` in log order; a class keeps its
`per_class` lowest priorities (a uniform sample without replacement). If the section's classes
then hold more than `max_steps`, the per-class quota drops by one until they fit, never below
one: every class is executed at least once, which may exceed `max_steps` when there are more
classes than that. Same log and seed, same sample. Steps without sequences are not executed.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def bucket(x: int) -> int:
    """Smallest power of two >= x; 0 for x <= 0."""
    return 0 if x <= 0 else 1 << (x - 1).bit_length()


def shape_key(spans: Sequence[tuple[int, int]], copies: bool, swaps: bool) -> str:
    """The class of a step whose sequences compute positions [start, end) each."""
    decode = [s for s, e in spans if e - s == 1]
    prefill = [(s, e) for s, e in spans if e - s > 1]
    mean_ctx = round(sum(decode) / len(decode)) if decode else 0
    key = (f"d{bucket(len(decode))}-c{bucket(mean_ctx)}"
           f"-p{bucket(sum(e - s for s, e in prefill))}"
           f"-x{bucket(max((s for s, _ in prefill), default=0))}")
    return key + ("-copy" if copies else "") + ("-swap" if swaps else "")


def quota(counts: dict[str, int], per_class: int, max_steps: int) -> int:
    """Steps per class: the largest q <= per_class with sum(min(n, q)) <= max_steps, >= 1."""
    q = per_class
    while q > 1 and sum(min(n, q) for n in counts.values()) > max_steps:
        q -= 1
    return q


@dataclass(frozen=True, slots=True)
class SampleRule:
    """The sampling parameters (recorded with every output)."""

    per_class: int = 4
    max_steps: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if self.per_class < 1 or self.max_steps < 1:
            raise ValueError("sampling: per_class and max_steps must be >= 1")


@dataclass(slots=True)
class Sampler:
    """Offer every step of one section in log order, then take `chosen()`."""

    rule: SampleRule
    rng: random.Random = field(init=False)
    heaps: dict[str, list[tuple[float, int, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    num_steps: int = 0
    num_empty: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.rule.seed)

    def offer(self, key: str | None, item: Any) -> None:
        """One step (`key` None: no sequences, not executed) and what to keep if chosen."""
        priority = self.rng.random()
        index = self.num_steps
        self.num_steps += 1
        if key is None:
            self.num_empty += 1
            return
        self.counts[key] = self.counts.get(key, 0) + 1
        heap = self.heaps.setdefault(key, [])
        heapq.heappush(heap, (-priority, index, item))
        if len(heap) > self.rule.per_class:
            heapq.heappop(heap)

    def chosen(self) -> list[tuple[str, Any]]:
        """(key, item) of the chosen steps, in log order."""
        q = quota(self.counts, self.rule.per_class, self.rule.max_steps)
        picked = []
        for key, heap in self.heaps.items():
            best = sorted(heap, key=lambda entry: -entry[0])[:q]
            picked += [(index, key, item) for _, index, item in best]
        return [(key, item) for _, key, item in sorted(picked, key=lambda p: p[0])]

    def summary(self) -> dict[str, Any]:
        """Steps per class in the section, and the quota applied."""
        return {"num_steps": self.num_steps, "num_without_sequences": self.num_empty,
                "per_class_quota": quota(self.counts, self.rule.per_class, self.rule.max_steps),
                "class_counts": dict(sorted(self.counts.items()))}
