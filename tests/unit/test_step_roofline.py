"""The roofline for mixture-of-experts models: experts touched under uniform routing."""
from __future__ import annotations

from dataclasses import replace

import pytest

from sim.cost.gpus import GpuSpec, make_gpu
from sim.cost.model_config import ModelConfig
from sim.cost.step_roofline import RooflineStepModel

MEMORY_BOUND = make_gpu("custom", memory_gib=1, hbm_gbps=1, tflops=1e9, pcie_gbps=1)
COMPUTE_BOUND = make_gpu("custom", memory_gib=1, hbm_gbps=1e9, tflops=1e-6, pcie_gbps=1)
DENSE = ModelConfig(name="d", num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=1,
                    head_dim=4, intermediate_size=16, vocab_size=32, dtype="fp16",
                    num_params=1000, max_context_len=64)
MOE = ModelConfig(name="m", num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=1,
                  head_dim=4, intermediate_size=16, vocab_size=32, dtype="fp16",
                  num_params=1000, max_context_len=64, num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=16)


def _linear(model: ModelConfig, gpu: GpuSpec, tokens: int) -> float:
    step = RooflineStepModel(model, gpu, overhead_s=0, per_seq_overhead_s=0)
    return step.predict([(tokens, 0)]).linear_s


@pytest.mark.parametrize("tokens", [1, 2, 5, 40])
def test_moe_reads_the_experts_a_step_touches(tokens: int) -> None:
    """Bytes: attention + router per layer, plus E(1-(1-k/E)^T) experts of 3 h I weights."""
    h, i, layers, w = 8, 16, 2, 2
    attn = h * 8 + 2 * h * 4 + 8 * h
    const = w * (layers * (attn + 4 * h) + h * 32)
    act = w * (layers * (4 * h + 2 * (2 + 1) * 4 + 4 + 3 * 2 * i) + h)
    touched = 4 * (1 - 0.5 ** tokens)
    want = (const + act * tokens + w * layers * touched * 3 * h * i) / 1e9
    assert _linear(MOE, MEMORY_BOUND, tokens) == pytest.approx(want)


def test_moe_flops_count_active_experts_only() -> None:
    """FLOPs: 2 x (attention + router + k experts) per token and layer, plus the LM head."""
    h, i, layers = 8, 16, 2
    per_token = 2 * layers * (h * 8 + 2 * h * 4 + 8 * h + 4 * h + 2 * 3 * h * i)
    want = (per_token * 10 + 2 * h * 32) / 1.0  # 1e-6 TFLOP/s = 1e6 FLOP/s
    assert _linear(MOE, COMPUTE_BOUND, 10) == pytest.approx(want / 1e6)


def test_mxfp4_experts_read_fewer_bytes() -> None:
    """MXFP4 experts (4.25 bits) make a memory-bound step cheaper than bf16 experts."""
    narrow = replace(MOE, expert_dtype="mxfp4")
    assert _linear(narrow, MEMORY_BOUND, 40) < _linear(MOE, MEMORY_BOUND, 40)
    assert _linear(DENSE, MEMORY_BOUND, 1) > 0
