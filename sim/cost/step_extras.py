"""What the GPU steps leave out: tensor-parallel all-reduces and the CPU side of a step.

- All-reduce (`tp_comm`): two per layer (after attention's O projection and after the MLP),
  each of T x h x w bytes, ring algorithm: latency + 2 (t - 1) / t x bytes / link bandwidth.
  Links per GPU preset (LINKS): NVLink where the SXM part has it (NVIDIA H100/H200 datasheets:
  900 GB/s both directions together; A100 SXM4: 600 GB/s), else PCIe (the preset's one-way
  figure). Latencies are estimates (vLLM's custom all-reduce on NVLink takes microseconds for
  decode-sized messages; NCCL over PCIe tens): a prediction, never measured here (one GPU).
- CPU side (`cpu_overhead_s`, `cpu_per_seq_s`): scheduling, input preparation, sampling and
  detokenisation; the roofline's estimate (2 ms + 10 us per sequence) unless given. With async
  scheduling (`overlapped`) the CPU prepares step n + 1 while the GPU runs step n, so only the
  part longer than the GPU step shows: max(0, cpu - gpu). Without it, cpu + gpu. `overlapped`
  None is the release default (on from vLLM 0.15, ../shared/docs/vllm_new_semantics.md).
The all-reduce time is added to `linear_s`; the CPU time is `overhead_s`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sim.cost.gpus import GpuSpec
from sim.cost.model_config import ModelConfig
from sim.cost.step_base import (
    DEFAULT_PER_SEQ_OVERHEAD_S,
    DEFAULT_STEP_OVERHEAD_S,
    ZERO_STEP,
    StepModel,
    StepTime,
)

# preset -> (link, one-way GB/s, latency per all-reduce in seconds: an estimate)
LINKS: dict[str, tuple[str, float, float]] = {
    "H100-80GB": ("NVLink 4", 450.0, 8e-6), "H200-141GB": ("NVLink 4", 450.0, 8e-6),
    "A100-80GB": ("NVLink 3", 300.0, 10e-6), "A100-40GB": ("NVLink 3", 300.0, 10e-6),
}
PCIE_ALLREDUCE_LATENCY_S = 25e-6


@dataclass(frozen=True, slots=True)
class Extras:
    """Which terms a step model adds (all on by default; see the module docstring)."""

    tp_comm: bool = True
    cpu_overhead_s: float | None = None
    cpu_per_seq_s: float | None = None
    overlapped: bool | None = None

    @property
    def overlap(self) -> bool:
        return True if self.overlapped is None else self.overlapped


def extras_of(config: Any) -> Extras:
    """The terms a run's configuration asks for: its CostConfig fields, and the scheduler's
    `async_scheduling` where the configuration has one (None: the release default)."""
    cost = config.cost
    ms, us = cost.cpu_overhead_ms, cost.cpu_per_seq_us
    return Extras(tp_comm=cost.tp_comm, cpu_overhead_s=None if ms is None else ms * 1e-3,
                  cpu_per_seq_s=None if us is None else us * 1e-6,
                  overlapped=getattr(config.scheduler, "async_scheduling", None))


def link(gpu: GpuSpec) -> tuple[str, float, float]:
    """(name, one-way GB/s, latency s) of the GPU-to-GPU link of a preset; PCIe otherwise."""
    return LINKS.get(gpu.name, ("PCIe", gpu.pcie_gbps, PCIE_ALLREDUCE_LATENCY_S))


def allreduce_s(model: ModelConfig, gpu: GpuSpec, tp: int, tokens: int) -> float:
    """Seconds of a step's 2 x L all-reduces over `tp` GPUs (0 at tp 1)."""
    if tp <= 1 or tokens <= 0:
        return 0.0
    _, gbps, latency = link(gpu)
    size = tokens * model.hidden_size * model.dtype_bytes
    return 2 * model.num_layers * (latency + 2 * (tp - 1) / tp * size / (gbps * 1e9))


def cpu_visible_s(cpu_s: float, gpu_s: float, overlapped: bool) -> float:
    """The CPU time a step adds: all of it, or under async scheduling what exceeds the GPU's."""
    if not overlapped:
        return cpu_s
    return cpu_s - gpu_s if cpu_s > gpu_s else 0.0


class ExtendedStepModel(StepModel):
    """A GPU step model (its attention and linear parts) plus all-reduces and the CPU side."""

    def __init__(self, base: StepModel, model: ModelConfig, gpu: GpuSpec, tp: int,
                 extras: Extras) -> None:
        self.base, self.model, self.gpu, self.tp, self.extras = base, model, gpu, tp, extras
        self.decode_context_cap = base.decode_context_cap
        # CPU terms: given, else the base model's own (roofline:overhead_ms=..., per_seq_us=...)
        self.cpu_s = _given(extras.cpu_overhead_s, base, "overhead_s", DEFAULT_STEP_OVERHEAD_S)
        self.cpu_seq_s = _given(extras.cpu_per_seq_s, base, "per_seq_overhead_s",
                                DEFAULT_PER_SEQ_OVERHEAD_S)
        if self.cpu_s < 0 or self.cpu_seq_s < 0:
            raise ValueError("--cpu-overhead-ms and --cpu-per-seq-us must be >= 0")
        name, gbps, latency = link(gpu)
        mode = "overlapped: async scheduling" if extras.overlap else "serial"
        cpu = f"CPU {self.cpu_s * 1e3:g} ms + {self.cpu_seq_s * 1e6:g} us/seq"
        terms = [f"{cpu} ({mode}; an estimate)"]
        if extras.tp_comm and tp > 1:
            terms.append(f"2 all-reduces per layer over {name} {gbps:g} GB/s + "
                         f"{latency * 1e6:g} us (a prediction)")
        self.description = f"{base.description}; {'; '.join(terms)}"

    def step_time(self, num_decode: int, sum_decode_context: int,
                  prefills: Sequence[tuple[int, int]], overlapped: bool | None) -> StepTime:
        """The step with `overlapped` for this step (None: the configured default)."""
        seqs = num_decode + len(prefills)
        if seqs == 0:
            return ZERO_STEP
        gpu = self.base.predict_split(num_decode, sum_decode_context, prefills)
        linear = gpu.linear_s
        if self.extras.tp_comm:
            tokens = num_decode + sum(new for new, _ in prefills)
            linear += allreduce_s(self.model, self.gpu, self.tp, tokens)
        cpu = self.cpu_s + self.cpu_seq_s * seqs
        overlap = self.extras.overlap if overlapped is None else overlapped
        return StepTime(gpu.attention_s, linear,
                        cpu_visible_s(cpu, gpu.attention_s + linear, overlap))

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        return self.step_time(num_decode, sum_decode_context, prefills, None)


def _given(value: float | None, base: StepModel, attr: str, default: float) -> float:
    if value is not None:
        return value
    own = getattr(base, attr, None)
    return float(own) if isinstance(own, (int, float)) else default
