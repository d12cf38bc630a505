"""A step model whose step times are the measured ones: the prediction times the median
measured / predicted ratio of the executed steps of the step's shape class.

The shape class is the executor's (kernels/execute/sample.py ``shape_key``), computed from
the arguments of ``predict_split`` (the decodes' mean context, the chunks' new and cached
tokens); copies and swaps are not seen there, so a step is looked up without those suffixes.
A class no executed step covers takes the median ratio of all executed steps.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from kernels.execute.sample import shape_key
from sim.cost.step_base import StepModel, StepTime


def class_ratios(predicted: Mapping[int, float], measured: Mapping[int, float],
                 classes: Mapping[int, str | None]) -> dict[str, float]:
    """Median measured / predicted GPU time per shape class, over the executed steps."""
    per: dict[str, list[float]] = {}
    for step, seconds in measured.items():
        key = classes[step]
        if key is not None:
            per.setdefault(key.removesuffix("-swap").removesuffix("-copy"), []).append(
                seconds / predicted[step])
    return {key: statistics.median(values) for key, values in per.items()}


def split_key(num_decode: int, sum_decode_context: int,
              prefills: Sequence[tuple[int, int]]) -> str:
    """``shape_key`` of a batch given as ``predict_split`` gets it. One decode span carries
    the whole context sum, so the mean the key rounds is the batch's mean."""
    spans = [(sum_decode_context, sum_decode_context + 1)] if num_decode else []
    spans += [(0, 1)] * max(0, num_decode - 1)
    spans += [(cached, cached + new) for new, cached in prefills]
    return shape_key(spans, False, False)


class MeasuredStep(StepModel):
    """``base``'s GPU parts scaled by the measured ratio of each step's class."""

    def __init__(self, base: StepModel, ratios: Mapping[str, float]) -> None:
        if not ratios:
            raise ValueError("no executed step to take a ratio from")
        self.base = base
        self.ratios = dict(ratios)
        self.fallback = statistics.median(self.ratios.values())
        self.decode_context_cap = base.decode_context_cap
        self.description = f"{base.description}, scaled by measured class ratios"
        self.misses = 0
        """Steps whose class no executed step covered (they took ``fallback``)."""

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        st = self.base.predict_split(num_decode, sum_decode_context, prefills)
        if not (num_decode or prefills):
            return st
        ratio = self.ratios.get(split_key(num_decode, sum_decode_context, prefills))
        if ratio is None:
            self.misses += 1
            ratio = self.fallback
        return StepTime(st.attention_s * ratio, st.linear_s * ratio, st.overhead_s)
