"""Model presets: the transformer shapes that size the KV cache and the step time.

A `ModelConfig` holds only what the simulator needs: layer count, attention head layout, MLP
width, vocabulary, weight dtype, parameter count and context length. Presets use the published
architectures (the checkpoints' HF `config.json`); any other decoder-only model can be read from a
local `config.json` by `load_hf_config`. Nothing is ever downloaded.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.cost.names import alias_table, norm_name

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """Shape of a decoder-only transformer.

    Invariants: num_heads % num_kv_heads == 0; dtype is a key of DTYPE_BYTES; all sizes > 0.
    `gated_mlp` is True for SwiGLU MLPs (gate, up, down: 3 matrices) and False for OPT's
    two-matrix MLP. `sliding_window` is None for full attention.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype: str
    num_params: int
    max_context_len: int
    sliding_window: int | None = None
    gated_mlp: bool = True

    def __post_init__(self) -> None:
        for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                      "intermediate_size", "vocab_size", "num_params", "max_context_len"):
            if getattr(self, field) <= 0:
                raise ValueError(f"model {self.name}: {field} must be > 0")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model {self.name}: num_heads {self.num_heads} is not a multiple "
                             f"of num_kv_heads {self.num_kv_heads}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"model {self.name}: dtype {self.dtype!r} not in "
                             f"{sorted(DTYPE_BYTES)}")
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError(f"model {self.name}: sliding_window must be > 0 or None")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def check_tp(self, tp: int) -> None:
        """Raise ValueError unless the heads split evenly over `tp` GPUs (vLLM's rule)."""
        if tp < 1:
            raise ValueError(f"tensor-parallel degree must be >= 1, got {tp}")
        if self.num_heads % tp:
            raise ValueError(f"model {self.name}: {self.num_heads} attention heads do not split "
                             f"over tp={tp} GPUs")
        if self.num_kv_heads % tp and tp % self.num_kv_heads:
            raise ValueError(f"model {self.name}: {self.num_kv_heads} KV heads do not split over "
                             f"tp={tp} GPUs (nor divide it)")

    def heads_per_gpu(self, tp: int) -> int:
        self.check_tp(tp)
        return self.num_heads // tp

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads stored per GPU; replicated (1 per GPU) when tp exceeds num_kv_heads."""
        self.check_tp(tp)
        return max(1, self.num_kv_heads // tp)


def estimate_num_params(model: ModelConfig, *, qkv_bias: bool = False,
                        tied_embeddings: bool = False, opt_style: bool = False) -> int:
    """Parameter count implied by `model`'s shapes (its own `num_params` is not used).

    Llama-style: attention + MLP matrices, two RMSNorms per layer, a final norm, embedding and
    (untied) LM head; exact for the Llama/Mistral/Qwen2 presets (Qwen2 with `qkv_bias`).
    OPT-style adds biases, LayerNorm betas and learned positions (max_context_len + 2 rows).
    """
    h, layers, inter = model.hidden_size, model.num_layers, model.intermediate_size
    q_dim, kv_dim = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    attn = h * q_dim + 2 * h * kv_dim + q_dim * h
    mlp = (3 if model.gated_mlp else 2) * h * inter
    if opt_style:
        biases = q_dim + 2 * kv_dim + h + inter + h
        embed = model.vocab_size * h + (model.max_context_len + 2) * h
        return embed + layers * (attn + mlp + biases + 4 * h) + 2 * h
    layer = attn + mlp + 2 * h + ((q_dim + 2 * kv_dim) if qkv_bias else 0)
    return model.vocab_size * h * (1 if tied_embeddings else 2) + layers * layer + h


def _opt(name: str, layers: int, hidden: int, heads: int, params: int) -> ModelConfig:
    # OPT: MHA with head_dim 128, MLP width 4 x hidden, vocab 50272, 2048 positions, fp16.
    return ModelConfig(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
                       num_kv_heads=heads, head_dim=128, intermediate_size=4 * hidden,
                       vocab_size=50272, dtype="fp16", num_params=params, max_context_len=2048,
                       gated_mlp=False)


def _llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, inter: int, vocab: int,
           dtype: str, params: int, ctx: int, window: int | None = None) -> ModelConfig:
    return ModelConfig(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
                       num_kv_heads=kv_heads, head_dim=hidden // heads, intermediate_size=inter,
                       vocab_size=vocab, dtype=dtype, num_params=params, max_context_len=ctx,
                       sliding_window=window)


# Parameter counts: OPT from estimate_num_params (the HF checkpoints' shapes); the others are the
# totals of the published safetensors checkpoints, which estimate_num_params reproduces exactly.
PRESETS: dict[str, ModelConfig] = {m.name: m for m in (
    _opt("OPT-13B", 40, 5120, 40, 12_853_473_280),
    _opt("OPT-66B", 64, 9216, 72, 65_719_701_504),
    _opt("OPT-175B", 96, 12288, 96, 174_604_468_224),
    _llama("LLaMA-13B", 40, 5120, 40, 40, 13824, 32000, "fp16", 13_015_864_320, 2048),
    _llama("Llama-2-7B", 32, 4096, 32, 32, 11008, 32000, "fp16", 6_738_415_616, 4096),
    _llama("Llama-2-13B", 40, 5120, 40, 40, 13824, 32000, "fp16", 13_015_864_320, 4096),
    _llama("Llama-2-70B", 80, 8192, 64, 8, 28672, 32000, "fp16", 68_976_648_192, 4096),
    _llama("Llama-3-8B", 32, 4096, 32, 8, 14336, 128256, "bf16", 8_030_261_248, 8192),
    _llama("Llama-3-70B", 80, 8192, 64, 8, 28672, 128256, "bf16", 70_553_706_496, 8192),
    _llama("Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256, "bf16", 8_030_261_248, 131072),
    _llama("Mistral-7B", 32, 4096, 32, 8, 14336, 32000, "bf16", 7_241_732_096, 32768, 4096),
    _llama("Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, "bf16", 7_615_616_512, 131072),
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


_HF_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16",
              # vLLM's dtype=auto serves float32 checkpoints in half precision.
              "float32": "fp16", "float": "fp16"}
_NON_GATED_TYPES = frozenset({"opt", "gpt2", "gptj", "gpt_neox", "gpt_bigcode", "bloom",
                              "falcon", "phi", "starcoder2"})
_MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


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


def _refuse_moe(cfg: dict[str, Any], file: Path) -> None:
    for key in _MOE_FIELDS:
        if isinstance(cfg.get(key), int) and cfg[key] > 1:
            raise ValueError(f"{file}: field {key}={cfg[key]}: mixture-of-experts models are "
                             "not supported")


def load_hf_config(path: str | Path) -> ModelConfig:
    """Read a local Hugging Face `config.json` (or the directory holding it); never downloads.

    `num_params` is estimated from the shapes (estimate_num_params). Mixture-of-experts configs
    are refused, since one token does not touch all weights.

    Raises:
        ValueError: unreadable file, invalid JSON, or a missing or invalid field (named).
    """
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "config.json"
    cfg = _read_json(file)
    _refuse_moe(cfg, file)
    model_type = str(cfg.get("model_type", ""))
    layers = _int_field(cfg, file, ("num_hidden_layers", "n_layer", "num_layers"))
    hidden = _int_field(cfg, file, ("hidden_size", "n_embd", "d_model"))
    heads = _int_field(cfg, file, ("num_attention_heads", "n_head"))
    if "head_dim" not in cfg and hidden % heads:
        raise ValueError(f"{file}: hidden_size {hidden} is not a multiple of "
                         f"num_attention_heads {heads} and there is no head_dim field")
    max_len = _int_field(cfg, file, ("max_position_embeddings", "n_positions",
                                     "max_sequence_length", "seq_length"))
    window = None if cfg.get("use_sliding_window") is False else cfg.get("sliding_window")
    if window is not None:
        window = _int_field(cfg, file, ("sliding_window",))
    try:
        model = ModelConfig(
            name=str(cfg.get("_name_or_path") or file.parent.name or file.stem),
            num_layers=layers, hidden_size=hidden, num_heads=heads,
            num_kv_heads=_int_field(cfg, file, ("num_key_value_heads",), heads),
            head_dim=_int_field(cfg, file, ("head_dim",), hidden // heads),
            intermediate_size=_int_field(cfg, file, ("intermediate_size", "ffn_dim", "n_inner")),
            vocab_size=_int_field(cfg, file, ("vocab_size",)), dtype=_dtype_field(cfg, file),
            num_params=1, max_context_len=max_len,
            sliding_window=window if window is not None and window < max_len else None,
            gated_mlp=model_type not in _NON_GATED_TYPES)
    except ValueError as exc:
        raise ValueError(f"{file}: {exc}") from exc
    params = estimate_num_params(
        model, qkv_bias=model_type == "qwen2" or cfg.get("attention_bias") is True,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), opt_style=model_type == "opt")
    return replace(model, num_params=params)
