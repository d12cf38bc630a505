"""The step-time interface shared by the roofline, poly and table models.

A step runs one forward pass over a batch: each scheduled sequence contributes
(new_tokens, context_tokens), context being the tokens already in its KV cache. Decodes
(new_tokens == 1) are summarised by a count and a context sum, so an engine that keeps running
sums can call `predict_split` without building the batch; `predict(batch)` does that split and
calls it, so both forms give identical results by construction.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

# CPU work per step outside the GPU kernels: scheduling, input preparation and kernel launches
# (vLLM v1 with CUDA graphs spends roughly 1-3 ms per step), plus per-sequence input/output
# handling (sampling metadata, detokenisation). Rough figures, not measurements.
DEFAULT_STEP_OVERHEAD_S = 2e-3
DEFAULT_PER_SEQ_OVERHEAD_S = 10e-6


class StepTime(NamedTuple):
    """Predicted duration of one step, in seconds, split by where the time goes.

    A named tuple rather than a frozen dataclass: one is built per simulated step, and a
    frozen dataclass's ``__init__`` cost ~4x a tuple's here.
    """

    attention_s: float
    linear_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.attention_s + self.linear_s + self.overhead_s


ZERO_STEP = StepTime(0.0, 0.0, 0.0)


def causal_pairs(new_tokens: int, context_tokens: int, window: int | None = None) -> int:
    """(query, key) pairs of causal attention for `new_tokens` queries after `context_tokens`.

    Query j (0-based) sits at position context + j and sees context + j + 1 keys, or `window`
    keys under a sliding window:

        keys  0 ............ context-1 | context ... context+new-1
        query j sees keys [max(0, context+j+1-window), context+j]
    """
    n, c = new_tokens, context_tokens
    if window is None or c + n <= window:
        return n * c + n * (n + 1) // 2
    k = max(0, min(n, window - c))  # queries whose whole prefix still fits in the window
    return k * c + k * (k + 1) // 2 + (n - k) * window


class StepModel:
    """Base class: subclasses implement `predict_split`; `predict` splits a batch for it.

    `decode_context_cap` is window - 1 for sliding-window models (a decode then reads at most
    `window` keys) and None otherwise; `predict_split` expects decode contexts already capped.
    """

    decode_context_cap: int | None = None
    description: str = ""
    """What the model is and where its numbers come from (printed by every run)."""

    def predict(self, batch: Iterable[tuple[int, int]]) -> StepTime:
        """Step time of `batch`, a sequence of (new_tokens >= 1, context_tokens >= 0)."""
        cap = self.decode_context_cap
        num_decode = 0
        decode_context = 0
        prefills: list[tuple[int, int]] = []
        for new, context in batch:
            if new < 1 or context < 0:
                raise ValueError(f"bad batch entry (new_tokens={new}, context_tokens={context})")
            if new == 1:
                num_decode += 1
                decode_context += context if cap is None or context < cap else cap
            else:
                prefills.append((new, context))
        return self.predict_split(num_decode, decode_context, prefills)

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        """Step time of `num_decode` decodes plus the listed (new_tokens, context) chunks.

        Args:
            num_decode: sequences scheduled with exactly one new token.
            sum_decode_context: sum of their contexts, each capped at `decode_context_cap`.
            prefills: (new_tokens >= 2, context_tokens) of every other scheduled sequence.

        Returns:
            The step time; all zeros for an empty step.
        """
        raise NotImplementedError
