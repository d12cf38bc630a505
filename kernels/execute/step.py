"""Execute one step record on an engine and describe the result as one output row.

Shared by the log replay (kernels/execute/run.py) and the calibration grid
(benchmarks/calibrate.py), which builds synthetic records of the same form, so both measure the
same forward. A row holds the batch description (kernels/execute/batch.py), the times of
kernels/execute/timing.py in seconds, and for MoE models how many experts the routing activated.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kernels.execute.batch import MAX_CAPTURE_SIZE, capture_sizes, make_batch
from kernels.execute.inputs import make_buffers, prepare
from kernels.execute.model import Engine
from kernels.execute.timing import TimingOptions, time_forward, time_moves
from kernels.validate.log import StepRecord


@dataclass(frozen=True, slots=True)
class ExecOptions:
    """What an execution does; recorded in the output header."""

    max_capture_size: int = MAX_CAPTURE_SIZE
    seed: int = 0
    timing: TimingOptions = field(default_factory=TimingOptions)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _moe_summary(counts: list[list[int]]) -> dict[str, float]:
    active = [sum(1 for c in layer if c) for layer in counts]
    return {"experts_active_mean": sum(active) / len(active),
            "tokens_per_expert_max": max(max(layer) for layer in counts)}


def execute_record(engine: Engine, rec: StepRecord, opts: ExecOptions,
                   trace: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Run `rec` once eagerly (recording `trace`), time it, and return its output row."""
    batch = make_batch(rec, capture_sizes(opts.max_capture_size))
    tensors = prepare(engine, batch, opts.seed)
    buffers = make_buffers(engine, batch)
    times = time_forward(engine, tensors, buffers, opts.timing, trace)
    times.moves_s = time_moves(engine, rec)
    desc = batch.describe()
    desc.update(copies=len(rec.copies), swap_out_blocks=sum(len(p) for _, p in rec.swap_out),
                swap_in_blocks=sum(len(p) for _, p in rec.swap_in))
    row: dict[str, Any] = {
        "step": rec.step, "batch": desc, "graph_s": times.graph_s, "eager_s": times.eager_s,
        **{f"{part}_s": value for part, value in times.parts.items()},
        "moves_s": times.moves_s, "replays": times.replays,
    }
    if tensors.routing is not None:
        row["moe"] = _moe_summary(tensors.routing.counts)
    return row
