"""Model presets: the transformer shapes that size the KV cache and the step time.

A `ModelConfig` (sim/cost/model_config.py) holds what the simulator needs: layers, head layout,
MLP or experts, vocabulary, dtypes, parameter count, context length and the few architecture
facts the executed forward needs (rotary base, norm epsilon, biases, Q/K norm). Presets use the
published architectures (the checkpoints' HF `config.json`); any other decoder can be read from
a local `config.json` (sim/cost/hf_config.py). Nothing is ever downloaded.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.cost.hf_config import load_hf_config
from sim.cost.model_config import (
    DTYPE_BYTES,
    ModelConfig,
    estimate_num_params,
    gpt_oss_num_params,
)
from sim.cost.names import alias_table, norm_name

__all__ = ["DTYPE_BYTES", "PRESETS", "ModelConfig", "estimate_num_params", "get_model",
           "load_hf_config", "preset_names", "resolve_model_name"]

def _opt(name: str, layers: int, hidden: int, heads: int, params: int) -> ModelConfig:
    # OPT: MHA with head_dim 128, MLP width 4 x hidden, vocab 50272, 2048 positions, fp16.
    return ModelConfig(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
                       num_kv_heads=heads, head_dim=128, intermediate_size=4 * hidden,
                       vocab_size=50272, dtype="fp16", num_params=params, max_context_len=2048,
                       gated_mlp=False, rope_theta=None)


def _llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, inter: int, vocab: int,
           dtype: str, params: int, ctx: int, window: int | None = None,
           **arch: Any) -> ModelConfig:
    return ModelConfig(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
                       num_kv_heads=kv_heads, head_dim=arch.pop("head_dim", hidden // heads),
                       intermediate_size=inter, vocab_size=vocab, dtype=dtype, num_params=params,
                       max_context_len=ctx, sliding_window=window, **arch)


def _counted(model: ModelConfig) -> ModelConfig:
    """`model` with num_params from its shapes (the MoE presets: estimate_num_params matches
    the published checkpoints' totals, e.g. Mixtral-8x7B 46,702,792,704)."""
    count = gpt_oss_num_params if model.name.startswith("gpt-oss") else estimate_num_params
    return replace(model, num_params=count(model))


def _moe(name: str, layers: int, hidden: int, heads: int, kv_heads: int, vocab: int, ctx: int,
         experts: tuple[int, int, int], **arch: Any) -> ModelConfig:
    num, top, width = experts
    return _counted(_llama(name, layers, hidden, heads, kv_heads, arch.pop("inter", width), vocab,
                           "bf16", 1, ctx, num_experts=num, num_experts_per_tok=top,
                           moe_intermediate_size=width, **arch))


# Parameter counts: OPT from estimate_num_params (the HF checkpoints' shapes); the others are the
# totals of the published safetensors checkpoints, which estimate_num_params reproduces exactly.
_L3: dict[str, Any] = {"rope_theta": 500000.0}
_QWEN3: dict[str, Any] = {"head_dim": 128, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
                          "qk_norm": True}
_OSS: dict[str, Any] = {"head_dim": 64, "rope_theta": 150000.0, "qkv_bias": True,
                        "expert_dtype": "mxfp4"}
PRESETS: dict[str, ModelConfig] = {m.name: m for m in (
    _opt("OPT-13B", 40, 5120, 40, 12_853_473_280),
    _opt("OPT-66B", 64, 9216, 72, 65_719_701_504),
    _opt("OPT-175B", 96, 12288, 96, 174_604_468_224),
    _llama("LLaMA-13B", 40, 5120, 40, 40, 13824, 32000, "fp16", 13_015_864_320, 2048,
           rms_norm_eps=1e-6),
    _llama("Llama-2-7B", 32, 4096, 32, 32, 11008, 32000, "fp16", 6_738_415_616, 4096),
    _llama("Llama-2-13B", 40, 5120, 40, 40, 13824, 32000, "fp16", 13_015_864_320, 4096),
    _llama("Llama-2-70B", 80, 8192, 64, 8, 28672, 32000, "fp16", 68_976_648_192, 4096),
    _llama("Llama-3-8B", 32, 4096, 32, 8, 14336, 128256, "bf16", 8_030_261_248, 8192, **_L3),
    _llama("Llama-3-70B", 80, 8192, 64, 8, 28672, 128256, "bf16", 70_553_706_496, 8192, **_L3),
    _llama("Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256, "bf16", 8_030_261_248, 131072,
           **_L3),
    _llama("Mistral-7B", 32, 4096, 32, 8, 14336, 32000, "bf16", 7_241_732_096, 32768, 4096),
    _llama("Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, "bf16", 7_615_616_512, 131072,
           rope_theta=1e6, rms_norm_eps=1e-6, qkv_bias=True),
    _llama("Qwen3-14B", 40, 5120, 40, 8, 17408, 151936, "bf16", 14_768_307_200, 40960,
           **_QWEN3),
    # MoE: (experts, experts per token, expert width); parameter counts from the shapes.
    _moe("Mixtral-8x7B", 32, 4096, 32, 8, 32000, 32768, (8, 2, 14336), rope_theta=1e6),
    _moe("Mixtral-8x22B", 56, 6144, 48, 8, 32000, 65536, (8, 2, 16384), rope_theta=1e6),
    _moe("Qwen3-30B-A3B", 48, 2048, 32, 4, 151936, 40960, (128, 8, 768), inter=6144, **_QWEN3),
    _moe("gpt-oss-20b", 24, 2880, 64, 8, 201088, 131072, (32, 4, 2880), **_OSS),
    _moe("gpt-oss-120b", 36, 2880, 64, 8, 201088, 131072, (128, 4, 2880), **_OSS),
)}

_EXTRA_ALIASES: dict[str, tuple[str, ...]] = {
    "OPT-13B": ("facebook/opt-13b",),
    "OPT-66B": ("facebook/opt-66b",),
    "OPT-175B": ("facebook/opt-175b",),
    "LLaMA-13B": ("llama-1-13b", "huggyllama/llama-13b"),
    "Llama-2-7B": ("llama2-7b", "meta-llama/Llama-2-7b-hf", "Llama-2-7b-chat-hf"),
    "Llama-2-13B": ("llama2-13b", "meta-llama/Llama-2-13b-hf", "Llama-2-13b-chat-hf"),
    "Llama-2-70B": ("llama2-70b", "meta-llama/Llama-2-70b-hf", "Llama-2-70b-chat-hf"),
    "Llama-3-8B": ("llama3-8b", "meta-llama/Meta-Llama-3-8B", "Meta-Llama-3-8B-Instruct"),
    "Llama-3-70B": ("llama3-70b", "meta-llama/Meta-Llama-3-70B", "Meta-Llama-3-70B-Instruct"),
    "Llama-3.1-8B": ("llama3.1-8b", "meta-llama/Llama-3.1-8B", "Meta-Llama-3.1-8B",
                     "Llama-3.1-8B-Instruct", "Meta-Llama-3.1-8B-Instruct"),
    "Mistral-7B": ("mistral-7b-v0.1", "mistralai/Mistral-7B-v0.1"),
    "Qwen2.5-7B": ("qwen2.5-7b-instruct", "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B-Instruct"),
    "Qwen3-14B": ("Qwen/Qwen3-14B",),
    "Mixtral-8x7B": ("mistralai/Mixtral-8x7B-v0.1", "Mixtral-8x7B-Instruct-v0.1"),
    "Mixtral-8x22B": ("mistralai/Mixtral-8x22B-v0.1", "Mixtral-8x22B-Instruct-v0.1"),
    "Qwen3-30B-A3B": ("Qwen/Qwen3-30B-A3B",),
    "gpt-oss-20b": ("openai/gpt-oss-20b",),
    "gpt-oss-120b": ("openai/gpt-oss-120b",),
}


_ALIASES = alias_table(PRESETS, _EXTRA_ALIASES)


def preset_names() -> list[str]:
    return list(PRESETS)


def resolve_model_name(name: str) -> str | None:
    """Canonical preset name for `name` (case-insensitive, '-', '_' and spaces ignored), or None."""
    return _ALIASES.get(norm_name(name))


def get_model(name_or_path: str) -> ModelConfig:
    """A preset by name or alias, or a local HF `config.json` (file or its directory).

    Raises:
        ValueError: unknown name, or a config file that cannot be read (the message names it).
    """
    path = Path(name_or_path).expanduser()
    if path.is_file() or (path / "config.json").is_file():
        return load_hf_config(path)
    canonical = resolve_model_name(name_or_path)
    if canonical is not None:
        return PRESETS[canonical]
    if name_or_path.endswith(".json") or name_or_path.startswith((".", "/", "~")):
        raise ValueError(f"model config {name_or_path}: no such file, nor a directory holding "
                         "config.json")
    raise ValueError(f"unknown model {name_or_path!r}; presets: {', '.join(PRESETS)}; "
                     "or give the path of a local HF config.json")


