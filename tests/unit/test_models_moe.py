"""Tests for the mixture-of-experts models: presets, HF config.json parsing, weight bytes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.cost.capacity import weight_bytes_per_gpu
from sim.cost.hf_config import load_hf_config
from sim.cost.models import PRESETS, get_model

# The published checkpoints' totals (safetensors metadata / model cards).
PUBLISHED = {"Mixtral-8x7B": 46_702_792_704, "Mixtral-8x22B": 140_620_634_112,
             "Qwen3-30B-A3B": 30_532_122_624, "Qwen3-14B": 14_768_307_200,
             "gpt-oss-20b": 20_914_757_184, "gpt-oss-120b": 116_829_156_672}

MIXTRAL_HF: dict[str, Any] = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 32768, "vocab_size": 32000,
    "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1e6,
    "sliding_window": None, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5,
}
QWEN3_MOE_HF: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "max_position_embeddings": 40960, "vocab_size": 151936, "torch_dtype": "bfloat16",
    "use_sliding_window": False, "sliding_window": None, "rope_theta": 1e6,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
}
GPT_OSS_HF: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_attention_heads": 64, "num_hidden_layers": 24,
    "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 32,
    "num_experts_per_tok": 4, "experts_per_token": 4, "attention_bias": True,
    "max_position_embeddings": 131072, "vocab_size": 201088, "sliding_window": 128,
    "rope_theta": 150000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "mxfp4"},
}


def _write(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_presets_match_published_parameter_counts(name: str) -> None:
    """Parameter counts computed from the shapes equal the published checkpoints'."""
    assert PRESETS[name].num_params == PUBLISHED[name]


@pytest.mark.parametrize(("cfg", "preset"), [(MIXTRAL_HF, "Mixtral-8x7B"),
                                             (QWEN3_MOE_HF, "Qwen3-30B-A3B"),
                                             (GPT_OSS_HF, "gpt-oss-20b")])
def test_hf_config_matches_preset(tmp_path: Path, cfg: dict[str, Any], preset: str) -> None:
    """Parsing the HF config.json gives the preset's shape, experts and parameter count."""
    model, want = load_hf_config(_write(tmp_path, cfg)), PRESETS[preset]
    for field in ("num_params", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                  "expert_dtype", "qk_norm", "qkv_bias", "head_dim", "sliding_window"):
        assert getattr(model, field) == getattr(want, field), field


def test_mxfp4_experts_are_counted_at_their_stored_size() -> None:
    """gpt-oss-120b's weights take about 65 GB (MXFP4 experts), not 234 GB in bf16."""
    oss = PRESETS["gpt-oss-120b"]
    assert 64e9 < weight_bytes_per_gpu(oss) < 66e9
    assert weight_bytes_per_gpu(PRESETS["Mixtral-8x7B"]) == 2 * PUBLISHED["Mixtral-8x7B"]


def test_unknown_moe_family_names_the_field(tmp_path: Path) -> None:
    """A MoE config of an unsupported family is refused, naming the field that marks it."""
    cfg = {**MIXTRAL_HF, "model_type": "deepseek_v3", "n_routed_experts": 256}
    cfg.pop("num_local_experts")
    with pytest.raises(ValueError, match="field n_routed_experts=256.*deepseek_v3"):
        get_model(str(_write(tmp_path, cfg)))


def test_moe_missing_width_names_the_field(tmp_path: Path) -> None:
    """A Qwen3-MoE config without the expert width names moe_intermediate_size."""
    cfg = {k: v for k, v in QWEN3_MOE_HF.items() if k != "moe_intermediate_size"}
    with pytest.raises(ValueError, match="missing field moe_intermediate_size"):
        load_hf_config(_write(tmp_path, cfg))
