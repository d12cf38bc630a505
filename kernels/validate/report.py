"""Results of validating one allocator section, their JSON form and the printed summary.

Timing cross-check (CUDA, real head layout only): the log's `attention_s` is the step-time
model's attention time for the whole step, all layers; the validator times its one layer's
kernels and compares `attention_s` with that time times `num_layers`. The kernels are timed
as a CUDA graph replay (kernel time, no launch latency; see `attn.time_step`). Relative error = predicted / measured - 1; the summary gives
the median and 90th percentile of its absolute value and the median signed error (the bias).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from kernels.validate.log import StepRecord

GIB = 1 << 30


@dataclass(slots=True)
class SectionResult:
    """What one section's replay found."""

    allocator: str
    model: str
    dtype: str
    layout: dict[str, Any]
    tolerance: float
    memory: dict[str, Any]
    timed: bool = False
    backend: str = "triton"
    num_layers: int = 1
    num_steps: int = 0
    num_validated: int = 0
    num_seq_checks: int = 0
    max_error: float = 0.0
    max_error_step: int | None = None
    per_step: list[dict[str, Any]] = field(default_factory=list)
    timing: dict[str, Any] = field(default_factory=dict)
    timing_methods: dict[str, int] = field(default_factory=dict)
    unverified_tokens: int = 0
    mutation: str | None = None
    failure: str | None = None
    failure_kind: str | None = None

    @property
    def failed(self) -> bool:
        return self.failure is not None or self.memory.get("fits") is False

    def add_step(self, rec: StepRecord, err: float, num_seqs: int, measured: float | None) -> None:
        """Record one validated step's max error (and its measured attention time)."""
        self.num_validated += 1
        self.num_seq_checks += num_seqs
        if err > self.max_error or self.max_error_step is None:
            self.max_error, self.max_error_step = max(err, self.max_error), rec.step
        row: dict[str, Any] = {"step": rec.step, "seqs": num_seqs, "max_error": err,
                               "attention_s": rec.attention_s}
        if measured is not None:
            row["measured_layer_s"] = measured
        self.per_step.append(row)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def finish_timing(res: SectionResult) -> None:
    """Summarise predicted (`attention_s`) against measured x num_layers over timed steps."""
    rel = [row["attention_s"] / (row["measured_layer_s"] * res.num_layers) - 1.0
           for row in res.per_step if row.get("measured_layer_s")]
    if not rel:
        return
    absolute = [abs(r) for r in rel]
    res.timing = {"steps": len(rel), "median_abs_rel_error": statistics.median(absolute),
                  "p90_abs_rel_error": _percentile(absolute, 0.9),
                  "median_rel_error": statistics.median(rel), "methods": res.timing_methods}


def _size(num_bytes: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.2f} {unit}"
    return f"{int(num_bytes)} B"


def _memory_line(mem: dict[str, Any], device: str) -> str:
    need = _size(mem["all_layers_bytes"])
    if device != "cuda":
        return f"  memory: K+V caches of all layers = {need} (computed; CPU run)"
    if mem.get("fits") is False:
        return f"  memory: K+V caches of all layers = {need} DO NOT FIT on this GPU"
    state = "allocated" if mem.get("allocated") else "not allocated (shrunk layout)"
    free, total = mem.get("free_after_bytes", 0) / GIB, mem.get("device_total_bytes", 0) / GIB
    return (f"  memory: K+V caches of all layers = {need} {state}; "
            f"headroom {free:.2f} GiB of {total:.2f} GiB")


def format_section(res: SectionResult, device: str) -> str:
    """A few readable lines for one section."""
    lay = res.layout
    lines = [f"validate {res.allocator}: {res.model}, {res.dtype}, {lay['num_heads']} q / "
             f"{lay['num_kv_heads']} kv heads x {lay['head_dim']}"
             + ("" if lay["real"] else " (shrunk)") + f", device {device}"
             + ("" if res.backend == "triton" else f", attention by {res.backend} (no kernels)"),
             _memory_line(res.memory, device),
             (f"  steps: {res.num_steps} replayed, {res.num_validated} compared "
              f"({res.num_seq_checks} sequence checks), max error {res.max_error:.3g} "
              f"(tolerance {res.tolerance:g}) at step {res.max_error_step}")]
    worst = sorted(res.per_step, key=lambda r: -r["max_error"])[:3]
    if worst:
        lines.append("  worst steps: " + ", ".join(f"{r['step']}: {r['max_error']:.3g}"
                                                 for r in worst))
    if res.timing:
        t = res.timing
        methods = ", ".join(f"{k} {v}" for k, v in t["methods"].items())
        lines.append(f"  timing: attention_s vs measured x {res.num_layers} layers over "
                     f"{t['steps']} steps: median |rel err| {t['median_abs_rel_error']:.1%}, "
                     f"p90 {t['p90_abs_rel_error']:.1%}, median signed "
                     f"{t['median_rel_error']:+.1%} (timed by: {methods})")
    if res.unverified_tokens:
        lines.append(f"  WARNING: {res.unverified_tokens} prefix-hit tokens unverified (the "
                     "log lacks prefix_hits[].token_ids; taken from what the blocks hold)")
    if res.mutation:
        lines.append(f"  mutation: {res.mutation}")
    lines.append(f"  FAIL {res.failure}" if res.failure else
                 ("  FAIL memory" if res.failed else "  PASS"))
    return "\n".join(lines)
