"""The two value types of a trace: one request (`TraceRequest`) and a trace's provenance.

A `TraceRequest` is what `Trace[i]` yields: sizes, sampling, session and the per-request
serving fields vLLM accepts (`cache_salt` isolates a request's prefix cache, `lora_name`
selects an adapter and keeps its cache apart, `priority` orders the priority scheduler,
lower first) and, for speculative decoding, the request's own per-position draft
`acceptance_rate`. `TraceMetadata` records where the requests came from and every change made.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request. Invariants: arrival >= 0 and finite, lengths >= 1, n >= 1,
    beam_width >= 1, n <= beam_width when beam search is on (beam_width > 1), and
    cache_salt / lora_name are None or non-empty."""

    request_id: str
    arrival_s: float
    prompt_len: int
    output_len: int
    n: int = 1
    beam_width: int = 1
    session_id: str | None = None
    turn: int | None = None
    line: int | None = None
    cache_salt: str | None = None
    lora_name: str | None = None
    priority: int = 0
    acceptance_rate: float | None = None

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id must be a non-empty string")
        if not np.isfinite(self.arrival_s) or self.arrival_s < 0:
            raise ValueError(f"{self.request_id}: arrival_s must be finite and >= 0")
        for name in ("prompt_len", "output_len", "n", "beam_width"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{self.request_id}: {name} must be >= 1")
        if self.beam_width > 1 and self.n > self.beam_width:
            raise ValueError(f"{self.request_id}: n > beam_width under beam search")
        if self.turn is not None and self.turn < 0:
            raise ValueError(f"{self.request_id}: turn must be >= 0")
        for name in ("cache_salt", "lora_name"):
            if getattr(self, name) == "":
                raise ValueError(f"{self.request_id}: {name} must be None or non-empty")
        rate = self.acceptance_rate
        if rate is not None and not 0.0 <= rate <= 1.0:
            raise ValueError(f"{self.request_id}: acceptance_rate must be in [0, 1]")


@dataclass(frozen=True, slots=True)
class TraceMetadata:
    """Where a trace came from and what loading or transforming it dropped or changed.

    `num_requests` and `span_s` are always recomputed by `Trace` from its data.
    `tokenizer` says what counted the tokens of a text dataset (None: the file gave the
    counts); `tokens_estimated` is True when that was the character estimate.
    """

    source: str | None = None
    format: str = "memory"
    span_s: float = 0.0
    num_requests: int = 0
    num_rows: int = 0
    num_skipped: int = 0
    num_truncated: int = 0
    sha256: str | None = None
    notes: tuple[str, ...] = ()
    tokenizer: str | None = None
    tokens_estimated: bool = False

    def with_note(self, note: str, **changes: Any) -> TraceMetadata:
        """Copy with `note` appended and other fields replaced."""
        return dataclasses.replace(self, notes=self.notes + (note,), **changes)
