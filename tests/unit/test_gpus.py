"""Tests for sim.cost.gpus: presets, aliases, custom GPUs and unit conversions."""
from __future__ import annotations

import pytest

from sim.cost.gpus import GIB, PRESETS, GpuSpec, get_gpu, make_gpu


@pytest.mark.parametrize(("alias", "name"), [
    ("h200", "H200-141GB"), ("NVIDIA H200", "H200-141GB"), ("a100-80gb", "A100-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("nvidia h100 80gb hbm3", "H100-80GB"),
    ("rtx_4090", "RTX-4090"), ("L40S", "L40S"),
])
def test_get_gpu_aliases(alias: str, name: str) -> None:
    """Preset names, loose spellings and torch device names resolve to the preset."""
    assert get_gpu(alias) is PRESETS[name]


def test_get_gpu_unknown_lists_presets() -> None:
    """An unknown GPU raises ValueError naming the presets and the custom options."""
    with pytest.raises(ValueError, match=r"unknown gpu 'v100'.*H200-141GB.*--gpu-mem-gib"):
        get_gpu("v100")


def test_presets_are_dense_rates_and_one_way_pcie() -> None:
    """Tensor rates are dense (half the sparse headline) and PCIe is one direction of x16."""
    assert PRESETS["H100-80GB"].bf16_tflops == PRESETS["H200-141GB"].bf16_tflops
    assert PRESETS["A100-80GB"].hbm_gbps > PRESETS["A100-40GB"].hbm_gbps
    assert {g.pcie_gbps for g in PRESETS.values()} == {32, 64}
    assert all(g.bf16_tflops < 1000 for g in PRESETS.values())


def test_sm_counts_and_their_check() -> None:
    """SM counts per preset (a custom GPU gets the H100 / H200's 132); 0 is refused."""
    assert [PRESETS[n].sms for n in ("A100-80GB", "H100-80GB", "H200-141GB", "L4")] == [
        108, 132, 132, 58]
    assert GpuSpec(name="g", memory_gib=2, hbm_gbps=3, bf16_tflops=4, pcie_gbps=5).sms == 132
    with pytest.raises(ValueError, match="sms must be > 0"):
        GpuSpec(name="g", memory_gib=2, hbm_gbps=3, bf16_tflops=4, pcie_gbps=5, sms=0)


def test_unit_conversions() -> None:
    """Memory converts from GiB, bandwidths from GB/s and FLOP/s from TFLOP/s."""
    gpu = GpuSpec(name="g", memory_gib=2, hbm_gbps=3, bf16_tflops=4, pcie_gbps=5)
    assert gpu.memory_bytes == 2 * GIB
    assert gpu.hbm_bytes_per_s == 3e9
    assert gpu.flops_per_s == 4e12
    assert gpu.pcie_bytes_per_s == 5e9


def test_custom_gpu_needs_all_numbers() -> None:
    """'custom' builds a GPU from all four numbers and names the missing ones otherwise."""
    gpu = make_gpu("custom", memory_gib=16, hbm_gbps=900, tflops=100, pcie_gbps=16)
    assert (gpu.name, gpu.memory_gib, gpu.bf16_tflops) == ("custom", 16, 100)
    with pytest.raises(ValueError, match="missing hbm_gbps, pcie_gbps"):
        make_gpu("custom", memory_gib=16, tflops=100)


def test_preset_override_is_marked_custom() -> None:
    """Overriding a preset's number keeps the others and renames the GPU."""
    gpu = make_gpu("a100-80gb", memory_gib=40)
    assert gpu.name == "A100-80GB (custom)"
    assert gpu.memory_gib == 40 and gpu.hbm_gbps == PRESETS["A100-80GB"].hbm_gbps
    assert make_gpu("a100-80gb") is PRESETS["A100-80GB"]


def test_non_positive_numbers_are_rejected() -> None:
    """A zero or negative figure raises ValueError naming the field."""
    with pytest.raises(ValueError, match="hbm_gbps must be > 0"):
        make_gpu("h100", hbm_gbps=0)
