"""PCIe time to swap KV blocks between GPU and CPU memory (preemption by swapping).

vLLM copies a swapped block with one cudaMemcpyAsync per layer for K and one for V, so a block
costs 2 x layers copies. Time for k blocks, one direction, per GPU (each GPU of a tensor-parallel
group moves its own shard over its own link at the same time):
    time = k x (copies_per_block x per_copy_overhead_s + block_bytes / (pcie x efficiency))
The fixed cost per copy is why swapping suffers at small block sizes (paper section 7).
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.cost.capacity import block_bytes
from sim.cost.gpus import GpuSpec
from sim.cost.models import ModelConfig

# Launch plus DMA setup of one small cudaMemcpyAsync: a few microseconds.
PER_COPY_OVERHEAD_S = 5e-6
# Pinned host copies typically reach ~80% of a PCIe link's one-direction peak.
PCIE_EFFICIENCY = 0.8


def swap_time_s(num_blocks: int, bytes_per_block: int, pcie_bytes_per_s: float, *,
                copies_per_block: int = 1,
                per_copy_overhead_s: float = PER_COPY_OVERHEAD_S) -> float:
    """Seconds to move `num_blocks` blocks one way over a link of `pcie_bytes_per_s`."""
    if num_blocks <= 0:
        return 0.0
    return num_blocks * (copies_per_block * per_copy_overhead_s
                         + bytes_per_block / pcie_bytes_per_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class SwapCost:
    """Swap cost of one configuration; `time_s(k)` is the one-direction time for k blocks."""

    block_bytes: int
    copies_per_block: int
    pcie_bytes_per_s: float
    per_copy_overhead_s: float = PER_COPY_OVERHEAD_S

    def time_s(self, num_blocks: int) -> float:
        return swap_time_s(num_blocks, self.block_bytes, self.pcie_bytes_per_s,
                           copies_per_block=self.copies_per_block,
                           per_copy_overhead_s=self.per_copy_overhead_s)


def make_swap_cost(model: ModelConfig, gpu: GpuSpec, block_size: int, *, tp: int = 1,
                   kv_cache_dtype: str = "auto", pcie_efficiency: float = PCIE_EFFICIENCY,
                   per_copy_overhead_s: float = PER_COPY_OVERHEAD_S) -> SwapCost:
    """Swap cost for `model` on `gpu` with `block_size`-token blocks (per-GPU bytes)."""
    if not 0.0 < pcie_efficiency <= 1.0:
        raise ValueError(f"pcie_efficiency must be in (0, 1], got {pcie_efficiency}")
    return SwapCost(block_bytes=block_bytes(model, block_size, tp, kv_cache_dtype),
                    copies_per_block=2 * model.num_layers,
                    pcie_bytes_per_s=gpu.pcie_bytes_per_s * pcie_efficiency,
                    per_copy_overhead_s=per_copy_overhead_s)
