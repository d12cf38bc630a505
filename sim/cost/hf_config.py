"""Reading a local Hugging Face `config.json` into a `ModelConfig` (never downloads).

Dense decoders of any family with the usual keys; mixture-of-experts only for the families
whose layers the simulator knows: Mixtral (`num_local_experts`, experts of width
`intermediate_size`), Qwen2-MoE / Qwen3-MoE (`num_experts`, `moe_intermediate_size`, optional
shared expert) and gpt-oss (`num_local_experts`, MXFP4 experts when `quantization_config`
says so). Any other MoE config is an error naming the field that marks it as MoE.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.cost.model_config import ModelConfig, estimate_num_params, gpt_oss_num_params

_HF_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16",
              # vLLM's dtype=auto serves float32 checkpoints in half precision.
              "float32": "fp16", "float": "fp16"}
_NON_GATED_TYPES = frozenset({"opt", "gpt2", "gptj", "gpt_neox", "gpt_bigcode", "bloom",
                              "falcon", "phi", "starcoder2"})
_MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
# model_type -> (experts key, expert width key)
MOE_FAMILIES = {"mixtral": ("num_local_experts", "intermediate_size"),
                "qwen2_moe": ("num_experts", "moe_intermediate_size"),
                "qwen3_moe": ("num_experts", "moe_intermediate_size"),
                "gpt_oss": ("num_local_experts", "intermediate_size")}


def _read_json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{file}: cannot read: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file}: line {exc.lineno}: invalid JSON: {exc.msg}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{file}: not UTF-8 text") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a JSON object")  # noqa: TRY004
    text = data.get("text_config")
    # Multimodal configs keep the language model's shape under text_config.
    return {**data, **text} if isinstance(text, dict) else data


def _int_field(cfg: dict[str, Any], file: Path, keys: tuple[str, ...],
               default: int | None = None) -> int:
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{file}: field {key} must be a positive integer, got {value!r}")
        return value
    if default is None:
        raise ValueError(f"{file}: missing field {keys[0]}")
    return default


def _dtype_field(cfg: dict[str, Any], file: Path) -> str:
    raw = cfg.get("torch_dtype", cfg.get("dtype"))
    if raw is None:
        return "fp16"  # transformers' default config dtype is float32, served in half precision
    dtype = _HF_DTYPES.get(str(raw).removeprefix("torch."))
    if dtype is None:
        raise ValueError(f"{file}: field torch_dtype {raw!r} is not one of {sorted(_HF_DTYPES)}")
    return dtype


def _moe_fields(cfg: dict[str, Any], file: Path, model_type: str) -> dict[str, Any]:
    """MoE keyword arguments of ModelConfig ({} for a dense config)."""
    marked = [k for k in _MOE_FIELDS if isinstance(cfg.get(k), int) and cfg[k] > 1]
    if not marked:
        return {}
    if model_type not in MOE_FAMILIES:
        raise ValueError(f"{file}: field {marked[0]}={cfg[marked[0]]}: mixture-of-experts "
                         f"model_type {model_type!r} is not supported (known: "
                         f"{', '.join(MOE_FAMILIES)})")
    if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
        raise ValueError(f"{file}: field mlp_only_layers / decoder_sparse_step: only MoE in "
                         "every layer is supported")
    experts_key, width_key = MOE_FAMILIES[model_type]
    quant = cfg.get("quantization_config")
    mxfp4 = isinstance(quant, dict) and quant.get("quant_method") == "mxfp4"
    return {"num_experts": _int_field(cfg, file, (experts_key,)),
            "num_experts_per_tok": _int_field(cfg, file, ("num_experts_per_tok",
                                                          "experts_per_token")),
            "moe_intermediate_size": _int_field(cfg, file, (width_key,)),
            "shared_expert_intermediate_size": cfg.get("shared_expert_intermediate_size") or 0,
            "expert_dtype": "mxfp4" if mxfp4 else None}


def _window(cfg: dict[str, Any], file: Path, max_len: int) -> int | None:
    window = None if cfg.get("use_sliding_window") is False else cfg.get("sliding_window")
    if window is None:
        return None
    window = _int_field(cfg, file, ("sliding_window",))
    # gpt-oss alternates windowed and full layers: priced as full attention (hybrid KV groups
    # are not modelled), which over-counts its KV.
    if cfg.get("model_type") == "gpt_oss" or window >= max_len:
        return None
    return window


def _shape(cfg: dict[str, Any], file: Path) -> dict[str, Any]:
    model_type = str(cfg.get("model_type", ""))
    hidden = _int_field(cfg, file, ("hidden_size", "n_embd", "d_model"))
    heads = _int_field(cfg, file, ("num_attention_heads", "n_head"))
    if "head_dim" not in cfg and hidden % heads:
        raise ValueError(f"{file}: hidden_size {hidden} is not a multiple of "
                         f"num_attention_heads {heads} and there is no head_dim field")
    max_len = _int_field(cfg, file, ("max_position_embeddings", "n_positions",
                                     "max_sequence_length", "seq_length"))
    theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta")
    return dict(
        name=str(cfg.get("_name_or_path") or file.parent.name or file.stem),
        num_layers=_int_field(cfg, file, ("num_hidden_layers", "n_layer", "num_layers")),
        hidden_size=hidden, num_heads=heads,
        num_kv_heads=_int_field(cfg, file, ("num_key_value_heads",), heads),
        head_dim=_int_field(cfg, file, ("head_dim",), hidden // heads),
        intermediate_size=_int_field(cfg, file, ("intermediate_size", "ffn_dim", "n_inner")),
        vocab_size=_int_field(cfg, file, ("vocab_size",)), dtype=_dtype_field(cfg, file),
        num_params=1, max_context_len=max_len, sliding_window=_window(cfg, file, max_len),
        gated_mlp=model_type not in _NON_GATED_TYPES,
        rope_theta=None if model_type == "opt" else float(theta or 10000.0),
        rms_norm_eps=float(cfg.get("rms_norm_eps") or cfg.get("layer_norm_eps") or 1e-5),
        qkv_bias=model_type in ("qwen2", "qwen2_moe") or cfg.get("attention_bias") is True,
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        **_moe_fields(cfg, file, model_type))


def load_hf_config(path: str | Path) -> ModelConfig:
    """Read a local Hugging Face `config.json` (or the directory holding it); never downloads.

    `num_params` is estimated from the shapes (estimate_num_params; gpt_oss_num_params).

    Raises:
        ValueError: unreadable file, invalid JSON, an unsupported MoE family, or a missing or
            invalid field (named).
    """
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "config.json"
    cfg = _read_json(file)
    try:
        model = ModelConfig(**_shape(cfg, file))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{file}: {exc}") from exc
    count = gpt_oss_num_params if cfg.get("model_type") == "gpt_oss" else estimate_num_params
    return replace(model, num_params=count(model))
