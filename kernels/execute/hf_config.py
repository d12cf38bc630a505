"""Hugging Face `config.json` keys mapped to the executor's architecture fields.

Only families whose layers the executed forward reproduces are accepted (else an error naming
`architectures`): Qwen2's QKV bias, Qwen3's per-head Q/K norm, Mixtral's and the Qwen MoE
experts, gpt-oss's sinks and sliding / full `layer_types` (its MXFP4 experts are refused; a
dequantised one runs standard SwiGLU experts, without its clamped activation, biases or YaRN
rotary). A float32 (or missing) `torch_dtype` is served in float16, as vLLM's `dtype=auto` does.
"""

from __future__ import annotations

from typing import Any

FAMILIES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe",
    "GptOssForCausalLM": "gpt_oss",
}
MXFP4_REFUSED = "the executor runs experts in the model dtype only (no MXFP4)"
_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16",
           "float32": "float16", "float": "float16"}


def _int(cfg: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"{where}: missing field {key}")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: field {key} must be a non-negative integer, got {value!r}")
    return value


def _family(cfg: dict[str, Any], where: str) -> str:
    names = cfg.get("architectures")
    name = names[0] if isinstance(names, list) and names else None
    if name not in FAMILIES:
        raise ValueError(f"{where}: field architectures = {names!r}: the executor knows "
                         f"{', '.join(FAMILIES)}")
    return FAMILIES[name]


def _moe(cfg: dict[str, Any], family: str, where: str) -> dict[str, int]:
    if family in ("mixtral", "gpt_oss"):
        experts, width = _int(cfg, "num_local_experts", where), _int(cfg, "intermediate_size",
                                                                       where)
    else:
        experts, width = _int(cfg, "num_experts", where), _int(cfg, "moe_intermediate_size",
                                                                 where)
        if cfg.get("mlp_only_layers") or _int(cfg, "decoder_sparse_step", where, 1) != 1:
            raise ValueError(f"{where}: field mlp_only_layers / decoder_sparse_step: the "
                             "executor runs MoE in every layer")
    return {"num_experts": experts, "num_experts_per_tok": _int(cfg, "num_experts_per_tok", where),
            "moe_intermediate_size": width,
            "shared_expert_intermediate_size": _int(cfg, "shared_expert_intermediate_size",
                                                    where, 0)}


def _gpt_oss(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method") == "mxfp4":
        raise ValueError(f"{where}: field quantization_config.quant_method = 'mxfp4': "
                         f"{MXFP4_REFUSED}")
    types = cfg.get("layer_types")
    if not isinstance(types, list):  # transformers' default: even layers windowed
        types = ["full_attention" if i % 2 else "sliding_attention"
                 for i in range(_int(cfg, "num_hidden_layers", where))]
    return {"attention_sinks": True, "layer_types": tuple(types)}


def _window(cfg: dict[str, Any], family: str) -> int | None:
    if family.startswith("qwen") and not cfg.get("use_sliding_window"):
        return None
    window = cfg.get("sliding_window")
    return window if isinstance(window, int) and window > 0 else None


def hf_fields(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """Architecture keyword arguments for the config `cfg` (read from `where`).

    Raises:
        ValueError: an unknown architecture or a missing or invalid field, named.
    """
    text = cfg.get("text_config")
    cfg = {**cfg, **text} if isinstance(text, dict) else cfg
    family = _family(cfg, where)
    heads = _int(cfg, "num_attention_heads", where)
    hidden = _int(cfg, "hidden_size", where)
    raw_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "float16")
    dtype = _DTYPES.get(raw_dtype.removeprefix("torch."))
    if dtype is None:
        raise ValueError(f"{where}: field torch_dtype {raw_dtype!r} is not one of "
                         f"{sorted(_DTYPES)}")
    fields: dict[str, Any] = {
        "name": str(cfg.get("_name_or_path") or cfg.get("model_type") or family),
        "num_layers": _int(cfg, "num_hidden_layers", where), "hidden_size": hidden,
        "num_heads": heads, "num_kv_heads": _int(cfg, "num_key_value_heads", where, heads),
        "head_dim": _int(cfg, "head_dim", where, hidden // max(heads, 1)),
        "intermediate_size": _int(cfg, "intermediate_size", where),
        "vocab_size": _int(cfg, "vocab_size", where), "dtype": dtype, "kv_cache_dtype": dtype,
        "sliding_window": _window(cfg, family),
        "rope_theta": float(cfg.get("rope_theta") or 10000.0),
        "rms_norm_eps": float(cfg.get("rms_norm_eps") or 1e-6),
        "qkv_bias": family in ("qwen2", "qwen2_moe", "gpt_oss")
        or bool(cfg.get("attention_bias")),
        "qk_norm": family in ("qwen3", "qwen3_moe"),
    }
    if family in ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss"):
        fields.update(_moe(cfg, family, where))
    if family == "gpt_oss":
        fields.update(_gpt_oss(cfg, where))
    return fields
