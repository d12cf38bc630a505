"""Request latencies of a simulated schedule retimed with measured step times.

The schedule is kept as simulated (same batches, same order); only step durations change.
A step's new duration is its simulated one with the predicted GPU part (attention + linear +
swap) replaced by the measured one: the executed step's own figure where it was executed,
else its prediction times the median measured / predicted ratio of the executed steps of
its shape class (kernels/execute/sample.py). Steps run back to back, except that one which
began after an idle engine (waiting for an arrival) starts no earlier than its simulated
start, the arrival that woke the engine. A request's first token and finish are the ends of
the steps whose ends they were in the simulation.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Steps:
    """The simulated steps in order: start, duration and predicted GPU seconds."""

    start: np.ndarray
    duration: np.ndarray
    gpu: np.ndarray


def class_ratios(predicted: Mapping[int, float], measured: Mapping[int, float],
                 classes: Mapping[int, str]) -> dict[str, float]:
    """Median measured / predicted GPU time per shape class, over the executed steps."""
    per: dict[str, list[float]] = {}
    for step, seconds in measured.items():
        per.setdefault(classes[step], []).append(seconds / predicted[step])
    return {key: statistics.median(values) for key, values in per.items()}


def measured_gpu(steps: Steps, measured: Mapping[int, float], classes: Sequence[str | None],
                 ratios: Mapping[str, float]) -> np.ndarray:
    """Per step, the measured GPU seconds (executed) or the class-scaled prediction.

    Raises:
        KeyError: a step of a class no executed step covers (the sample misses a class).
    """
    out = steps.gpu.copy()
    for i, key in enumerate(classes):
        if i in measured:
            out[i] = measured[i]
        elif key is not None:
            out[i] = steps.gpu[i] * ratios[key]
    return out


def retime(steps: Steps, gpu: np.ndarray) -> np.ndarray:
    """Step end times with GPU parts ``gpu`` in place of the predicted ones."""
    ends = steps.start + steps.duration
    idle_before = np.r_[True, steps.start[1:] > ends[:-1]]
    new_duration = steps.duration - steps.gpu + gpu
    out = np.empty_like(ends)
    clock = 0.0
    for i in range(len(ends)):
        begin = max(clock, float(steps.start[i])) if idle_before[i] else clock
        clock = begin + float(new_duration[i])
        out[i] = clock
    return out


def step_of(ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Index of the step whose end each time is (the nearest end; times are step ends)."""
    right = np.clip(np.searchsorted(ends, times), 0, len(ends) - 1)
    left = np.clip(right - 1, 0, len(ends) - 1)
    pick = np.where(np.abs(ends[left] - times) <= np.abs(ends[right] - times), left, right)
    worst = float(np.max(np.abs(ends[pick] - times), initial=0.0))
    if worst > 1e-9 * max(1.0, float(ends[-1]) if len(ends) else 1.0):
        raise ValueError(f"a request time is no step's end (off by {worst:.3g} s)")
    return pick


def latencies(arrival: np.ndarray, first: np.ndarray, finish: np.ndarray,
              outputs: np.ndarray) -> dict[str, float]:
    """Mean TTFT, TPOT (requests with >= 2 outputs), ITL (token-weighted) and E2E, seconds."""
    ttft, e2e = first - arrival, finish - arrival
    many = outputs > 1
    decode = finish[many] - first[many]
    gaps = outputs[many] - 1
    return {"ttft": float(np.mean(ttft)), "tpot": float(np.mean(decode / gaps)) if many.any()
            else 0.0, "itl": float(decode.sum() / gaps.sum()) if many.any() else 0.0,
            "e2e": float(np.mean(e2e))}


def compare(steps: Steps, gpu: np.ndarray, arrival: np.ndarray, first: np.ndarray,
            finish: np.ndarray, outputs: np.ndarray) -> dict[str, dict[str, float]]:
    """Simulated and executed mean latencies, and executed / simulated - 1, per metric."""
    ends = steps.start + steps.duration
    first_step, finish_step = step_of(ends, first), step_of(ends, finish)
    simulated = latencies(arrival, ends[first_step], ends[finish_step], outputs)
    new_ends = retime(steps, gpu)
    executed = latencies(arrival, new_ends[first_step], new_ends[finish_step], outputs)
    return {name: {"simulated": simulated[name], "executed": executed[name],
                   "error": simulated[name] / executed[name] - 1 if executed[name] else 0.0}
            for name in simulated}
