"""The executor reads the whole architecture from the log header or an HF config, or names
the field that is missing."""
from __future__ import annotations

from typing import Any

import pytest

from kernels.execute.arch import HEADER_FIELDS, MOE_FIELDS, Architecture
from kernels.validate.log import LogError
from tests.unit.validate_logkit import tiny_architecture

BASE = {"name": "tiny", "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
        "dtype": "bf16", "kv_cache_dtype": "auto", "sliding_window": None}
MOE = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
       "shared_expert_intermediate_size": 0}


def _model(**extra: Any) -> dict[str, Any]:
    return {**BASE, **tiny_architecture(64), **extra}


def test_header_fields_are_read() -> None:
    """Every field lands in the Architecture; dtypes become torch names, auto the weights'."""
    a = Architecture.from_header(_model(rope_theta=500000, qkv_bias=True), "f:1")
    assert (a.hidden_size, a.intermediate_size, a.vocab_size) == (64, 128, 1024)
    assert a.rope_theta == 500000.0 and a.qkv_bias and not a.qk_norm and not a.moe
    assert a.dtype == a.kv_cache_dtype == "bfloat16"
    assert Architecture.from_header(_model(rope_theta=None), "f:1").rope_theta is None


@pytest.mark.parametrize("name", ["fp8", "fp8_e4m3", "FP8"])
def test_fp8_cache_read(name: str) -> None:
    """vLLM's fp8 names mean an e4m3 cache beside bf16 weights; auto is the weights' dtype."""
    a = Architecture.from_header(_model(kv_cache_dtype=name), "f:1")
    assert (a.dtype, a.kv_cache_dtype, a.fp8_kv) == ("bfloat16", "fp8_e4m3", True)
    assert not Architecture.from_header(_model(), "f:1").fp8_kv


@pytest.mark.parametrize("field", sorted(HEADER_FIELDS))
def test_missing_field_is_named(field: str) -> None:
    """Each architecture field is required; the error names file, line and field."""
    model = _model()
    del model[field]
    with pytest.raises(LogError, match=rf"f:3: missing field 'model\.{field}'"):
        Architecture.from_header(model, "f:3")


@pytest.mark.parametrize("field", sorted(MOE_FIELDS))
def test_moe_fields_required_for_moe(field: str) -> None:
    """A MoE header (num_experts > 0) must also give the expert fields."""
    model = _model(**MOE)
    del model[field]
    with pytest.raises(LogError, match=rf"model\.{field}"):
        Architecture.from_header(model, "f:1")
    assert Architecture.from_header(_model(**MOE), "f:1").moe


@pytest.mark.parametrize(("field", "value"), [("gated_mlp", "yes"), ("hidden_size", 2.5),
                                              ("rms_norm_eps", True), ("num_experts", None)])
def test_mistyped_field_is_named(field: str, value: Any) -> None:
    with pytest.raises(LogError, match=rf"field 'model\.{field}' has type"):
        Architecture.from_header(_model(**{field: value}), "f:1")


def test_inconsistent_values_are_log_errors() -> None:
    """Too many experts per token, an unknown dtype and a bad window are refused."""
    with pytest.raises(LogError, match="num_experts_per_tok"):
        Architecture.from_header(_model(**{**MOE, "num_experts_per_tok": 9}), "f:1")
    with pytest.raises(LogError, match="model.kv_cache_dtype"):
        Architecture.from_header(_model(kv_cache_dtype="int8"), "f:1")
    with pytest.raises(LogError, match="f:1: .*model.kv_cache_dtype.*e4m3.*not e5m2"):
        Architecture.from_header(_model(kv_cache_dtype="fp8_e5m2"), "f:1")
    with pytest.raises(LogError, match="kv_cache_dtype float16 differs from dtype bfloat16"):
        Architecture.from_header(_model(kv_cache_dtype="fp16"), "f:1")
    with pytest.raises(LogError, match="sliding_window"):
        Architecture.from_header(_model(sliding_window=0), "f:1")


LLAMA3 = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
          "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
          "vocab_size": 128256, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
          "torch_dtype": "bfloat16"}


def test_hf_llama() -> None:
    a = Architecture.from_hf_config(LLAMA3, "c.json")
    assert (a.num_layers, a.head_dim, a.num_kv_heads, a.dtype) == (32, 128, 8, "bfloat16")
    assert not (a.qkv_bias or a.qk_norm or a.moe) and a.sliding_window is None


def test_hf_families() -> None:
    """Qwen2 has a QKV bias, Qwen3 per-head norms, Mistral a window, MoE their experts."""
    qwen2 = {**LLAMA3, "architectures": ["Qwen2ForCausalLM"], "sliding_window": 4096,
             "use_sliding_window": False}
    a = Architecture.from_hf_config(qwen2, "c")
    assert a.qkv_bias and a.sliding_window is None
    a = Architecture.from_hf_config({**LLAMA3, "architectures": ["Qwen3ForCausalLM"],
                                     "head_dim": 128, "num_attention_heads": 40}, "c")
    assert a.qk_norm and not a.qkv_bias and a.head_dim == 128
    a = Architecture.from_hf_config({**LLAMA3, "architectures": ["MistralForCausalLM"],
                                     "sliding_window": 4096}, "c")
    assert a.sliding_window == 4096
    a = Architecture.from_hf_config({**LLAMA3, "architectures": ["MixtralForCausalLM"],
                                     "num_local_experts": 8, "num_experts_per_tok": 2}, "c")
    assert (a.num_experts, a.num_experts_per_tok, a.moe_intermediate_size) == (8, 2, 14336)
    a = Architecture.from_hf_config({**LLAMA3, "architectures": ["Qwen3MoeForCausalLM"],
                                     "num_experts": 128, "num_experts_per_tok": 8,
                                     "moe_intermediate_size": 768, "mlp_only_layers": []}, "c")
    assert (a.num_experts, a.moe_intermediate_size, a.qk_norm) == (128, 768, True)


@pytest.mark.parametrize(("cfg", "field"), [
    ({**LLAMA3, "architectures": ["GPT2LMHeadModel"]}, "architectures"),
    ({k: v for k, v in LLAMA3.items() if k != "num_hidden_layers"}, "num_hidden_layers"),
    ({**LLAMA3, "architectures": ["MixtralForCausalLM"]}, "num_local_experts"),
    ({**LLAMA3, "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4,
      "num_experts_per_tok": 2, "moe_intermediate_size": 8, "mlp_only_layers": [0]},
     "mlp_only_layers"),
    ({**LLAMA3, "torch_dtype": "int8"}, "torch_dtype"),
])
def test_hf_errors_name_the_field(cfg: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Architecture.from_hf_config(cfg, "c.json")


def test_mxfp4_experts_refused() -> None:
    """A header whose experts are stored in MXFP4 (gpt-oss) is refused, naming the field."""
    model = _model(expert_dtype="mxfp4")
    with pytest.raises(LogError, match="model.expert_dtype"):
        Architecture.from_header(model, "log:1")


def test_attention_variants_read() -> None:
    """Sinks and per-layer types: a layer's window is the model's on sliding layers only;
    without layer_types every layer has the model's window."""
    a = Architecture.from_header(_model(attention_sinks=True, sliding_window=128,
                                        layer_types=["sliding_attention", "full_attention"]),
                                 "f:1")
    assert a.attention_sinks and [a.window(i) for i in range(2)] == [128, None]
    b = Architecture.from_header(_model(sliding_window=64), "f:1")
    assert not b.attention_sinks and [b.window(i) for i in range(2)] == [64, 64]


@pytest.mark.parametrize(("extra", "message"), [
    ({"attention_sinks": 1}, "model.attention_sinks' has type int"),
    ({"layer_types": "sliding_attention"}, "model.layer_types' must be null or a list"),
    ({"layer_types": ["full_attention"]}, "layer_types must list 2 of"),
    ({"layer_types": ["sliding_attention", "full_attention"]}, "need a sliding_window"),
    ({"layer_types": ["chunked_attention", "full_attention"], "sliding_window": 8},
     "layer_types must list 2"),
])
def test_bad_attention_variants_named(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(LogError, match=rf"f:1: .*{message}"):
        Architecture.from_header(_model(**extra), "f:1")


GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
           "num_hidden_layers": 4, "hidden_size": 2880, "head_dim": 64,
           "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 2880,
           "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
           "sliding_window": 128, "rope_theta": 150000, "attention_bias": True,
           "layer_types": ["sliding_attention", "full_attention"] * 2,
           "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "mxfp4"}}


def test_hf_gpt_oss() -> None:
    """gpt-oss as shipped (MXFP4 experts) is refused naming the field; dequantised, its
    attention has sinks, a QKV bias and windows on the sliding layers only (transformers'
    alternation where layer_types is absent)."""
    with pytest.raises(ValueError, match=r"quantization_config.quant_method = 'mxfp4': the "
                                         r"executor runs experts in the model dtype only"):
        Architecture.from_hf_config(GPT_OSS, "c.json")
    bf16 = {k: v for k, v in GPT_OSS.items() if k != "quantization_config"}
    a = Architecture.from_hf_config(bf16, "c.json")
    assert a.attention_sinks and a.qkv_bias and (a.num_experts, a.num_experts_per_tok,
                                                 a.moe_intermediate_size) == (32, 4, 2880)
    assert [a.window(i) for i in range(4)] == [128, None, 128, None] and a.head_dim == 64
    b = Architecture.from_hf_config({k: v for k, v in bf16.items() if k != "layer_types"}, "c")
    assert b.layer_types == a.layer_types
