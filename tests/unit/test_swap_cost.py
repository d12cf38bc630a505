"""Tests for sim.cost.swap_cost: PCIe swap time with a fixed cost per copy."""
from __future__ import annotations

import pytest

from sim.cost.gpus import get_gpu
from sim.cost.models import get_model
from sim.cost.swap_cost import PER_COPY_OVERHEAD_S, SwapCost, make_swap_cost, swap_time_s


def test_swap_time_by_hand() -> None:
    """k blocks cost k x (copies x overhead + bytes / bandwidth); zero blocks cost nothing."""
    assert swap_time_s(3, 1000, 1e6, copies_per_block=4, per_copy_overhead_s=1e-4) == (
        pytest.approx(3 * (4e-4 + 1e-3)))
    assert swap_time_s(0, 1000, 1e6) == 0.0


def test_make_swap_cost_for_llama_on_a100() -> None:
    """Llama-2-7B blocks of 16 are 8 MiB, copied as 64 pieces over 80% of 32 GB/s."""
    cost = make_swap_cost(get_model("llama-2-7b"), get_gpu("a100-80gb"), 16)
    assert cost == SwapCost(block_bytes=8 << 20, copies_per_block=64,
                            pcie_bytes_per_s=0.8 * 32e9, per_copy_overhead_s=PER_COPY_OVERHEAD_S)
    assert cost.time_s(10) == pytest.approx(10 * (64 * 5e-6 + (8 << 20) / 25.6e9))


def test_small_blocks_swap_slower_per_token() -> None:
    """Per token, swapping costs more at small block sizes (paper section 7)."""
    model, gpu = get_model("llama-2-7b"), get_gpu("a100-80gb")
    per_token = [make_swap_cost(model, gpu, bs).time_s(1) / bs for bs in (1, 4, 16, 64, 256)]
    assert per_token == sorted(per_token, reverse=True)
    assert per_token[0] > 5 * per_token[2]


def test_swap_cost_per_gpu_under_tensor_parallelism() -> None:
    """With tp=4 each GPU moves a quarter of the block bytes over its own link."""
    model, gpu = get_model("llama-2-70b"), get_gpu("a100-80gb")
    assert make_swap_cost(model, gpu, 16, tp=4).block_bytes * 4 == (
        make_swap_cost(model, gpu, 16, tp=1).block_bytes)
    with pytest.raises(ValueError, match="pcie_efficiency"):
        make_swap_cost(model, gpu, 16, pcie_efficiency=0)
