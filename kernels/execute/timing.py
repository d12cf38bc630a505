"""Time one prepared step: eager launches, one CUDA graph of the whole forward, one per part.

Method (CUDA): one eager forward first (Triton compilation, cuBLAS handles; it also records the
trace), then `eager_trials` eager forwards, each between two CUDA events (host launch cost
included wherever the GPU waits for the host). Then the whole forward is captured as one CUDA
graph and replayed: one replay sets the repeat count (enough replays for about `target_s`, at
most `max_replays`), then `graph_trials` times that many replays between two events; the
figure is the median per replay. The same is done for a graph of each part alone (attention,
linear, other), so `attention_s + linear_s + other_s` next to `graph_s` shows how much the parts
overlap or interfere. Replays run back to back: each layer's weights and KV pages are far
larger than the L2, so there is no warm cache to flush. Block copies and swaps run outside the
graph, per layer, timed by the host clock between two synchronisations (swaps are synchronous).
On the CPU (Triton interpreter) every figure is the host clock of one call and graphs are off.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from kernels.copy_blocks import copy_blocks, copy_plan_tensor
from kernels.execute.forward import PARTS, Forward
from kernels.execute.inputs import Buffers, StepTensors
from kernels.execute.model import Engine
from kernels.swap import swap_kv
from kernels.validate.log import StepRecord
from kernels.validate.ops import _copy_batches


@dataclass(frozen=True, slots=True)
class TimingOptions:
    """How a step is timed (recorded in every output)."""

    graphs: bool = True
    parts: bool = True
    eager_trials: int = 3
    graph_trials: int = 3
    target_s: float = 0.01
    max_replays: int = 20


@dataclass(slots=True)
class StepTimes:
    """Seconds per step: eager, whole graph, each part's graph, copies and swaps."""

    eager_s: float
    graph_s: float | None
    parts: dict[str, float | None]
    moves_s: float
    replays: int = 0


def _event_time(fn: Any) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def graph_time(fn: Any, opts: TimingOptions) -> tuple[float, int]:
    """Median seconds per replay of `fn` captured as a CUDA graph, and the replay count."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    first = _event_time(graph.replay)
    reps = max(1, min(opts.max_replays, round(opts.target_s / max(first, 1e-6))))

    def replays() -> None:
        for _ in range(reps):
            graph.replay()

    times = [_event_time(replays) / reps for _ in range(opts.graph_trials)]
    return statistics.median(times), reps


def _host_time(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_forward(engine: Engine, t: StepTensors, b: Buffers, opts: TimingOptions,
                 trace: list[dict[str, Any]] | None = None) -> StepTimes:
    """Eager, graph and per-part times of the step's forward (see the module docstring)."""
    whole = Forward(engine, t, b)
    parts: dict[str, float | None] = dict.fromkeys(PARTS)
    if engine.device.type != "cuda":
        eager = _host_time(Forward(engine, t, b, trace=trace))
        if opts.parts:
            parts = {p: _host_time(Forward(engine, t, b, (p,))) for p in PARTS}
        return StepTimes(eager, None, parts, 0.0)
    Forward(engine, t, b, trace=trace)()
    torch.cuda.synchronize()
    eager = statistics.median(_event_time(whole) for _ in range(opts.eager_trials))
    graph_s, reps = None, 0
    if opts.graphs:
        graph_s, reps = graph_time(whole, opts)
        if opts.parts:
            parts = {p: graph_time(Forward(engine, t, b, (p,)), opts)[0] for p in PARTS}
    elif opts.parts:
        parts = {p: statistics.median(_event_time(Forward(engine, t, b, (p,)))
                                      for _ in range(opts.eager_trials)) for p in PARTS}
    return StepTimes(eager, graph_s, parts, 0.0, reps)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_moves(engine: Engine, rec: StepRecord) -> float:
    """Seconds for the step's block copies and swaps on every layer (0.0 when none)."""
    if not (rec.copies or rec.swap_out or rec.swap_in):
        return 0.0
    plans = [copy_plan_tensor(batch, engine.num_gpu_blocks, engine.device)
             for batch in _copy_batches(rec.copies)]
    _sync(engine.device)
    start = time.perf_counter()
    for layer in range(engine.arch.num_layers):
        gpu = engine.cache(layer)
        for plan in plans:
            copy_blocks(gpu[0], gpu[1], plan)
        for _, pairs in rec.swap_out:
            if pairs:
                swap_kv(gpu, engine.cpu_cache(layer), pairs)
        for _, pairs in rec.swap_in:
            if pairs:
                swap_kv(engine.cpu_cache(layer), gpu, pairs)
    _sync(engine.device)
    return time.perf_counter() - start
