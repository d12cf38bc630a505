"""The model shape the simulator prices: `ModelConfig`, its parameter count and weight bytes.

Dense and mixture-of-experts (MoE) decoders. A MoE layer replaces the MLP by a router
(hidden x experts) and `num_experts` gated experts of width `moe_intermediate_size`, of which
each token uses `num_experts_per_tok`, plus an optional shared expert. Memory counts every
weight (`weight_bytes`); FLOPs and bytes of a step count the experts a batch touches
(sim/cost/step_roofline.py). Expert weights may be stored narrower than the rest
(`expert_dtype` "mxfp4": 4-bit values with one 8-bit scale per 32, 4.25 bits, as gpt-oss ships).
"""
from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
# Bits per stored expert weight for narrower expert formats (MXFP4: 4 + 8/32).
EXPERT_BITS: dict[str, float] = {"mxfp4": 4.25}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """Shape of a decoder-only transformer.

    Invariants: num_heads % num_kv_heads == 0; dtype is a key of DTYPE_BYTES; all sizes > 0.
    `gated_mlp` is True for SwiGLU MLPs (gate, up, down: 3 matrices) and False for OPT's
    two-matrix MLP. `sliding_window` is None for full attention. `rope_theta` None means
    learned positions (OPT). `num_experts` 0 is a dense MLP; otherwise 1 <=
    `num_experts_per_tok` <= `num_experts` and `moe_intermediate_size` > 0. `expert_dtype`
    None stores experts in `dtype`, else a key of EXPERT_BITS.
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
    rope_theta: float | None = 10000.0
    rms_norm_eps: float = 1e-5
    qkv_bias: bool = False
    qk_norm: bool = False
    tied_embeddings: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    expert_dtype: str | None = None

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
        self._check_moe()

    def _check_moe(self) -> None:
        if self.num_experts < 0 or self.shared_expert_intermediate_size < 0:
            raise ValueError(f"model {self.name}: num_experts and "
                             "shared_expert_intermediate_size must be >= 0")
        if self.moe and not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise ValueError(f"model {self.name}: num_experts_per_tok must be in "
                             f"[1, num_experts={self.num_experts}]")
        if self.moe and self.moe_intermediate_size <= 0:
            raise ValueError(f"model {self.name}: moe_intermediate_size must be > 0")
        if self.expert_dtype is not None and self.expert_dtype not in EXPERT_BITS:
            raise ValueError(f"model {self.name}: expert_dtype {self.expert_dtype!r} not in "
                             f"{sorted(EXPERT_BITS)}")

    @property
    def moe(self) -> bool:
        return self.num_experts > 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def expert_params(self) -> int:
        """Weights of all routed experts, all layers (0 for a dense model)."""
        return (self.num_layers * self.num_experts * self.mlp_matrices * self.hidden_size
                * self.moe_intermediate_size)

    @property
    def expert_bytes_per_param(self) -> float:
        if self.expert_dtype is None:
            return float(self.dtype_bytes)
        return EXPERT_BITS[self.expert_dtype] / 8

    @property
    def weight_bytes(self) -> int:
        """Bytes of every weight: routed experts at `expert_dtype`, the rest at `dtype`."""
        experts = self.expert_params
        rest = (self.num_params - experts) * self.dtype_bytes
        return rest + -(-int(experts * self.expert_bytes_per_param * 8) // 8)

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


def estimate_num_params(model: ModelConfig, *, qkv_bias: bool | None = None,
                        tied_embeddings: bool | None = None, opt_style: bool | None = None) -> int:
    """Parameter count implied by `model`'s shapes (its own `num_params` is not used).

    Llama-style: attention + MLP (or router + experts + shared expert) matrices, Q/K/V biases
    (`qkv_bias`, default the model's), per-head Q/K norms (`qk_norm`), two RMSNorms per layer,
    a final norm, embedding and LM head (unless tied). OPT-style (default: not gated_mlp) adds
    biases, LayerNorm betas and learned positions (max_context_len + 2 rows).
    """
    bias = model.qkv_bias if qkv_bias is None else qkv_bias
    tied = model.tied_embeddings if tied_embeddings is None else tied_embeddings
    opt = (not model.gated_mlp) if opt_style is None else opt_style
    h, layers, inter = model.hidden_size, model.num_layers, model.intermediate_size
    q_dim, kv_dim = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    attn = h * q_dim + 2 * h * kv_dim + q_dim * h
    mlp = model.mlp_matrices * h * inter
    if opt:
        biases = q_dim + 2 * kv_dim + h + inter + h
        embed = model.vocab_size * h + (model.max_context_len + 2) * h
        return embed + layers * (attn + mlp + biases + 4 * h) + 2 * h
    if model.moe:
        shared = model.shared_expert_intermediate_size
        mlp = (model.num_experts * h + model.expert_params // layers
               + (model.mlp_matrices * h * shared + h if shared else 0))
    layer = (attn + mlp + 2 * h + ((q_dim + 2 * kv_dim) if bias else 0)
             + (2 * model.head_dim if model.qk_norm else 0))
    return model.vocab_size * h * (1 if tied else 2) + layers * layer + h


def gpt_oss_num_params(model: ModelConfig) -> int:
    """gpt-oss's count: `estimate_num_params` plus its extra biases (O projection, router,
    experts) and one attention sink per head and layer (from the checkpoint's tensors)."""
    h, layers, experts = model.hidden_size, model.num_layers, model.num_experts
    width = model.moe_intermediate_size
    extra = h + model.num_heads + experts + experts * (2 * width + h)
    return estimate_num_params(model) + layers * extra
