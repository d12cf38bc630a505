"""Terms the GPU steps leave out: tensor-parallel all-reduces and the CPU side of a step."""
from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main
from sim.cost.gpus import get_gpu, make_gpu
from sim.cost.models import get_model
from sim.cost.step_extras import Extras, allreduce_s, cpu_visible_s, link
from sim.cost.step_model import make_step_model

MODEL = get_model("Llama-3-70B")


def test_allreduce_by_hand() -> None:
    """2 L x (latency + 2 (t-1)/t x T h w / bandwidth); nothing at tp 1."""
    h200 = get_gpu("H200-141GB")
    size = 64 * 8192 * 2
    want = 2 * 80 * (8e-6 + 2 * 3 / 4 * size / 450e9)
    assert allreduce_s(MODEL, h200, 4, 64) == pytest.approx(want)
    assert allreduce_s(MODEL, h200, 1, 64) == 0.0


def test_pcie_gpus_and_custom_gpus_use_pcie() -> None:
    assert link(get_gpu("L40S"))[:2] == ("PCIe", 32)
    assert link(make_gpu("H200-141GB", hbm_gbps=5000))[0] == "PCIe"
    assert link(get_gpu("A100-80GB"))[0] == "NVLink 3"


def test_cpu_overlap_rule() -> None:
    assert cpu_visible_s(3e-3, 1e-3, True) == pytest.approx(2e-3)
    assert cpu_visible_s(3e-3, 5e-3, True) == 0.0
    assert cpu_visible_s(3e-3, 5e-3, False) == 3e-3


def test_step_model_adds_allreduce_and_switches_off() -> None:
    """tp 4: linear grows by the all-reduces; --no-tp-comm removes them; serial CPU adds all."""
    gpu, batch = get_gpu("H200-141GB"), [(1, 1000)] * 64
    on = make_step_model("roofline", MODEL, gpu, 4).predict(batch)
    off = make_step_model("roofline", MODEL, gpu, 4, extras=Extras(tp_comm=False)).predict(batch)
    assert on.linear_s - off.linear_s == pytest.approx(allreduce_s(MODEL, gpu, 4, 64))
    serial = make_step_model("roofline", MODEL, gpu, 4,
                             extras=Extras(overlapped=False, cpu_overhead_s=1e-3,
                                           cpu_per_seq_s=0.0)).predict(batch)
    assert serial.overhead_s == pytest.approx(1e-3)
    assert on.overhead_s == pytest.approx(max(0.0, 2e-3 + 64 * 10e-6 - on.attention_s
                                              - on.linear_s))
    desc = make_step_model("roofline", MODEL, gpu, 4).description
    assert "all-reduces per layer over NVLink 4" in desc and "prediction" in desc


def test_cli_flags_reach_the_step_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    """--cpu-overhead-ms and --no-tp-comm are used, and the run prints its step model."""
    args = ["--limit", "2", "--allocators", "paged", "--num-gpu-blocks", "100", "--no-progress",
            "--model", "Llama-3-70B", "--gpu", "h200", "--tp", "4", "--out", str(tmp_path)]
    assert main([*args, "--cpu-overhead-ms", "1.5", "--no-tp-comm"]) == 0
    out = capsys.readouterr().out
    assert "step model used: calibrated roofline: efficiencies and floors fitted on" in out
    assert "no shipped calibration for Llama-3-70B (bf16, kv bf16) on H200-141GB at tp 4" in out
    assert "CPU 1.5 ms" in out and "all-reduces" not in out
    assert main([*args, "--cpu-overhead-ms", "-1"]) == 2
    assert "--cpu-overhead-ms" in capsys.readouterr().err
