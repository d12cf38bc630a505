"""The decoder architecture an executed step runs: read from the log header or an HF config.

`Architecture.from_header` reads the log header's `model` section (the whole architecture, so
kernels/ needs nothing from sim/) and names any missing or mistyped field; `from_hf_config`
maps an HF `config.json` of a known family (Llama, Mistral, Qwen2/2.5, Qwen3, Mixtral, Qwen MoE,
dequantised gpt-oss). Dtypes are torch names; the KV cache's is the model's or `fp8_e4m3`
(vLLM's fp8). Optional gpt-oss variants: `attention_sinks` and per-layer `layer_types`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kernels.execute.hf_config import MXFP4_REFUSED, hf_fields
from kernels.validate.log import DTYPES, FP8_NAMES, LogError

FP8_KV = "fp8_e4m3"

# Fields every header's `model` section needs beyond the validator's (name, layers, heads,
# head_dim, dtype, kv_cache_dtype, sliding_window), then those a MoE model needs too.
HEADER_FIELDS: dict[str, type | tuple[type, ...]] = {
    "hidden_size": int, "intermediate_size": int, "vocab_size": int,
    "rope_theta": (float, type(None)), "rms_norm_eps": float, "gated_mlp": bool,
    "qkv_bias": bool, "qk_norm": bool, "num_experts": int,
}
MOE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "num_experts_per_tok": int, "moe_intermediate_size": int,
    "shared_expert_intermediate_size": int,
}
LAYER_TYPES = ("sliding_attention", "full_attention")
_BASE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "num_layers": int, "num_heads": int, "num_kv_heads": int, "head_dim": int, "dtype": str,
}


@dataclass(frozen=True, slots=True)
class Architecture:
    """Shape of a decoder-only transformer as the executor runs it.

    `rope_theta` None means learned absolute positions (no rotary); `gated_mlp` False is OPT's
    two-matrix MLP (ReLU); `num_experts` 0 is a dense MLP, otherwise every layer's MLP is a
    mixture of `num_experts` experts of width `moe_intermediate_size`, `num_experts_per_tok`
    of them per token, plus a shared expert of `shared_expert_intermediate_size` (0: none).
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
    kv_cache_dtype: str
    sliding_window: int | None
    rope_theta: float | None
    rms_norm_eps: float
    gated_mlp: bool = True
    qkv_bias: bool = False
    qk_norm: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    attention_sinks: bool = False
    layer_types: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        sizes = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                 "intermediate_size", "vocab_size")
        for name in sizes:
            if getattr(self, name) < 1:
                raise ValueError(f"model {self.name}: {name} must be >= 1")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model {self.name}: num_heads {self.num_heads} is not a multiple "
                             f"of num_kv_heads {self.num_kv_heads}")
        if self.moe and not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise ValueError(f"model {self.name}: num_experts_per_tok must be in "
                             f"[1, num_experts={self.num_experts}]")
        if self.moe and self.moe_intermediate_size < 1:
            raise ValueError(f"model {self.name}: moe_intermediate_size must be >= 1")
        self._check_layer_types()
        if self.kv_cache_dtype not in (self.dtype, FP8_KV):
            raise ValueError(f"model {self.name}: kv_cache_dtype {self.kv_cache_dtype} differs "
                             f"from dtype {self.dtype}; the paged kernels take the model dtype "
                             "or fp8 (e4m3)")

    def _check_layer_types(self) -> None:
        types = self.layer_types
        if types is None:
            return
        if len(types) != self.num_layers or not set(types) <= set(LAYER_TYPES):
            raise ValueError(f"model {self.name}: layer_types must list {self.num_layers} of "
                             f"{', '.join(LAYER_TYPES)}")
        if "sliding_attention" in types and self.sliding_window is None:
            raise ValueError(f"model {self.name}: sliding_attention layers need a "
                             "sliding_window")

    def window(self, layer: int) -> int | None:
        """The sliding window of `layer` (None: full attention)."""
        if self.layer_types is not None and self.layer_types[layer] == "full_attention":
            return None
        return self.sliding_window

    @property
    def fp8_kv(self) -> bool:
        """Whether the KV cache is fp8 e4m3 (quantised on write, per-tensor K and V scales)."""
        return self.kv_cache_dtype == FP8_KV

    @property
    def moe(self) -> bool:
        return self.num_experts > 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_header(cls, model: Any, where: str) -> Architecture:
        """The architecture in a header's `model` section; `where` is 'file:line'.

        Raises:
            LogError: a missing or mistyped field, named as `model.FIELD`.
        """
        if isinstance(model, dict) and model.get("expert_dtype") is not None:
            raise LogError(f"{where}: field 'model.expert_dtype' = {model['expert_dtype']!r}: "
                           f"{MXFP4_REFUSED}")
        need = {**_BASE_FIELDS, **HEADER_FIELDS}
        if isinstance(model, dict) and _get(model, "num_experts", int, where) > 0:
            need.update(MOE_FIELDS)
        values = {key: _get(model, key, kind, where) for key, kind in need.items()}
        dtype = _dtype(values.pop("dtype"), "field 'model.dtype'", where)
        kv_dtype = kv_cache_dtype(model.get("kv_cache_dtype"), dtype, where)
        window = model.get("sliding_window")
        if window is not None and (not isinstance(window, int) or window < 1):
            raise LogError(f"{where}: field 'model.sliding_window' must be null or >= 1")
        theta = values.pop("rope_theta")
        try:
            return cls(name=str(model.get("name", "?")), dtype=dtype, kv_cache_dtype=kv_dtype,
                       sliding_window=window,
                       rope_theta=None if theta is None else float(theta),
                       **_variants(model, where), **values)
        except ValueError as exc:
            raise LogError(f"{where}: {exc}") from None

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], where: str) -> Architecture:
        """Map a Hugging Face `config.json` (already parsed) to an Architecture.

        Raises:
            ValueError: an unknown architecture or a missing field, named.
        """
        return cls(**hf_fields(cfg, where))


def _get(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise LogError(f"{where}: missing field 'model.{key}' (the executed forward needs the "
                       "whole architecture in the log header; see kernels/execute/README.md)")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds:
        kinds = (*kinds, int)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise LogError(f"{where}: field 'model.{key}' has type {type(value).__name__}")
    return value


def _variants(model: dict[str, Any], where: str) -> dict[str, Any]:
    """The optional attention variants of a header: sinks (bool) and layer_types (a list)."""
    sinks = model.get("attention_sinks", False)
    if not isinstance(sinks, bool):
        raise LogError(f"{where}: field 'model.attention_sinks' has type {type(sinks).__name__}")
    types = model.get("layer_types")
    if types is not None and not (isinstance(types, list)
                                  and all(isinstance(t, str) for t in types)):
        raise LogError(f"{where}: field 'model.layer_types' must be null or a list of "
                       f"{' / '.join(LAYER_TYPES)}")
    return {"attention_sinks": sinks, "layer_types": None if types is None else tuple(types)}


def kv_cache_dtype(value: Any, dtype: str, where: str,
                   what: str = "field 'model.kv_cache_dtype'") -> str:
    """The cache dtype of a header's `model.kv_cache_dtype` (or a `--kv-cache-dtype`): `dtype`
    for auto or null, `fp8_e4m3` for fp8 / fp8_e4m3; e5m2 is refused (the kernels take e4m3).

    Raises:
        LogError: an unknown or unsupported name, naming `where` and `what`.
    """
    name = str(value or "auto").lower()
    if name == "auto":
        return dtype
    if name in FP8_NAMES:
        return FP8_KV
    if name.startswith("fp8"):
        raise LogError(f"{where}: {what} = {value!r}: the kernels take fp8 e4m3 caches only "
                       "(fp8 or fp8_e4m3), not e5m2")
    return _dtype(value, what, where, " (and fp8 caches)")


def _dtype(value: Any, what: str, where: str, more: str = "") -> str:
    name = DTYPES.get(str(value).lower())
    if name is None:
        raise LogError(f"{where}: {what} = {value!r}: the executor supports fp16, bf16 and "
                       f"fp32{more}")
    return name
