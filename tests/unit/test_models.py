"""Tests for sim.cost.models: presets, name lookup and local HF config.json reading."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.cost.model_config import gpt_oss_num_params
from sim.cost.models import PRESETS, ModelConfig, estimate_num_params, get_model, load_hf_config

LLAMA2_7B_HF: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "max_position_embeddings": 4096, "vocab_size": 32000,
    "torch_dtype": "float16", "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
}
QWEN25_7B_HF: dict[str, Any] = {
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "max_position_embeddings": 131072, "vocab_size": 152064, "torch_dtype": "bfloat16",
    "sliding_window": 131072, "use_sliding_window": False, "tie_word_embeddings": False,
}
MISTRAL_HF: dict[str, Any] = {
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 32768, "vocab_size": 32000, "torch_dtype": "bfloat16",
    "sliding_window": 4096, "tie_word_embeddings": False,
}
OPT_13B_HF: dict[str, Any] = {
    "model_type": "opt", "hidden_size": 5120, "ffn_dim": 20480, "num_attention_heads": 40,
    "num_hidden_layers": 40, "max_position_embeddings": 2048, "vocab_size": 50272,
    "torch_dtype": "float16", "_name_or_path": "facebook/opt-13b",
}


def _write(tmp_path: Path, cfg: dict[str, Any], name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("name", list(PRESETS))
def test_estimate_reproduces_preset_param_counts(name: str) -> None:
    """The shape-based estimate equals every preset's published parameter count."""
    model = PRESETS[name]
    count = gpt_oss_num_params if name.startswith("gpt-oss") else estimate_num_params
    assert count(model) == model.num_params


def test_preset_shapes_follow_published_configs() -> None:
    """Presets carry the GQA layouts, windows and context lengths of the released models."""
    assert PRESETS["Llama-2-70B"].num_kv_heads == 8
    assert PRESETS["Llama-3-8B"].head_dim == 128 and PRESETS["Llama-3-8B"].num_kv_heads == 8
    assert PRESETS["Llama-3.1-8B"].max_context_len == 131072
    assert PRESETS["Mistral-7B"].sliding_window == 4096
    assert PRESETS["Qwen2.5-7B"].num_kv_heads == 4 and PRESETS["Qwen2.5-7B"].head_dim == 128
    assert not PRESETS["OPT-66B"].gated_mlp and PRESETS["OPT-66B"].num_heads == 72
    assert all(m.sliding_window is None for n, m in PRESETS.items() if n != "Mistral-7B")
    assert PRESETS["Qwen2.5-7B"].qkv_bias and PRESETS["Qwen3-14B"].qk_norm
    assert PRESETS["OPT-13B"].rope_theta is None


@pytest.mark.parametrize("alias", ["llama-2-7b", "LLAMA2-7B", "Llama_2_7b",
                                   "meta-llama/Llama-2-7b-hf"])
def test_get_model_accepts_aliases_case_insensitively(alias: str) -> None:
    """Lookups ignore case and separators and accept HF ids."""
    assert get_model(alias) is PRESETS["Llama-2-7B"]


def test_get_model_unknown_name_lists_presets() -> None:
    """An unknown name raises ValueError naming the presets."""
    with pytest.raises(ValueError, match=r"unknown model 'gpt-5'.*Llama-2-7B"):
        get_model("gpt-5")


def test_get_model_missing_path_names_it(tmp_path: Path) -> None:
    """A path-like name that does not exist raises ValueError naming the path."""
    missing = tmp_path / "nope" / "config.json"
    with pytest.raises(ValueError, match="no such file"):
        get_model(str(missing))


def test_load_llama_config_matches_preset(tmp_path: Path) -> None:
    """A Llama-2-7B config.json, given as file or directory, reads back as the preset's shape."""
    path = _write(tmp_path, LLAMA2_7B_HF)
    for source in (path, tmp_path, str(path)):
        model = get_model(str(source)) if isinstance(source, str) else load_hf_config(source)
        preset = PRESETS["Llama-2-7B"]
        assert model.num_params == preset.num_params
        assert (model.num_layers, model.num_kv_heads, model.head_dim, model.dtype) == (
            preset.num_layers, preset.num_kv_heads, preset.head_dim, preset.dtype)


def test_load_qwen_and_mistral_windows(tmp_path: Path) -> None:
    """Qwen2's disabled window is dropped, Mistral's 4096 window is kept, qkv bias is counted."""
    qwen = load_hf_config(_write(tmp_path, QWEN25_7B_HF, "qwen.json"))
    mistral = load_hf_config(_write(tmp_path, MISTRAL_HF, "mistral.json"))
    assert qwen.sliding_window is None and qwen.num_params == PRESETS["Qwen2.5-7B"].num_params
    assert mistral.sliding_window == 4096
    assert mistral.num_params == PRESETS["Mistral-7B"].num_params


def test_load_opt_config(tmp_path: Path) -> None:
    """An OPT config uses ffn_dim, a two-matrix MLP and OPT's parameter layout."""
    model = load_hf_config(_write(tmp_path, OPT_13B_HF))
    assert model.name == "facebook/opt-13b" and not model.gated_mlp
    assert model.num_params == PRESETS["OPT-13B"].num_params
    assert model.intermediate_size == 20480


def test_load_missing_field_names_file_and_field(tmp_path: Path) -> None:
    """A config without vocab_size raises ValueError naming the file and the field."""
    cfg = {k: v for k, v in LLAMA2_7B_HF.items() if k != "vocab_size"}
    path = _write(tmp_path, cfg)
    with pytest.raises(ValueError, match=f"{path}: missing field vocab_size"):
        load_hf_config(path)


def test_load_bad_field_and_bad_json(tmp_path: Path) -> None:
    """A non-integer field and invalid JSON both give one line naming the file."""
    path = _write(tmp_path, {**LLAMA2_7B_HF, "num_hidden_layers": "32"})
    with pytest.raises(ValueError, match="field num_hidden_layers must be a positive integer"):
        load_hf_config(path)
    broken = tmp_path / "broken.json"
    broken.write_text('{"hidden_size": 4096,\n oops}')
    with pytest.raises(ValueError, match=r"broken.json: line 2: invalid JSON"):
        load_hf_config(broken)
    with pytest.raises(ValueError, match="torch_dtype 'int8'"):
        load_hf_config(_write(tmp_path, {**LLAMA2_7B_HF, "torch_dtype": "int8"}, "d.json"))


def test_load_refuses_mixture_of_experts(tmp_path: Path) -> None:
    """A Mixtral-style config is refused, naming the expert-count field."""
    path = _write(tmp_path, {**MISTRAL_HF, "num_local_experts": 8})
    with pytest.raises(ValueError, match="num_local_experts=8: mixture-of-experts"):
        load_hf_config(path)


def test_tensor_parallel_head_split() -> None:
    """KV heads split over tp, are replicated past their count, and uneven splits are refused."""
    llama70 = PRESETS["Llama-2-70B"]
    assert llama70.kv_heads_per_gpu(4) == 2
    assert llama70.kv_heads_per_gpu(16) == 1
    assert llama70.heads_per_gpu(16) == 4
    with pytest.raises(ValueError, match="do not split over tp=3"):
        llama70.kv_heads_per_gpu(3)
    with pytest.raises(ValueError, match=">= 1"):
        llama70.check_tp(0)


def test_model_config_validates() -> None:
    """Heads that KV heads do not divide, and unknown dtypes, are rejected."""
    base: dict[str, Any] = {"name": "x", "num_layers": 2, "hidden_size": 8, "num_heads": 3,
                            "num_kv_heads": 2, "head_dim": 4, "intermediate_size": 16,
                            "vocab_size": 32, "dtype": "fp16", "num_params": 100,
                            "max_context_len": 64}
    with pytest.raises(ValueError, match="not a multiple"):
        ModelConfig(**base)
    with pytest.raises(ValueError, match="dtype 'int4'"):
        ModelConfig(**{**base, "num_kv_heads": 1, "dtype": "int4"})
