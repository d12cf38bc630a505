"""KV-cache capacity, computed the way vLLM sizes its block pool.

Per GPU:  kv_bytes = floor(memory x gpu_memory_utilization) - weights - activation reserve,
          num_gpu_blocks = kv_bytes // block_bytes,
          block_bytes = block_size x 2 (K and V) x layers x kv_heads_per_gpu x head_dim x dtype.
The activation reserve stands in for vLLM's profiling run (formula in activation_reserve_bytes).
`num_gpu_blocks_override` replaces the result, as vLLM's option does. Swap space gives
num_cpu_blocks = swap_space_gib // block_bytes, per GPU like vLLM's --swap-space.
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.cost.gpus import GIB, GpuSpec
from sim.cost.models import ModelConfig

KV_CACHE_DTYPES: dict[str, int | None] = {"auto": None, "fp16": 2, "bf16": 2, "fp8": 1,
                                          "fp8_e4m3": 1, "fp8_e5m2": 1}
# CUDA context, cuBLAS workspaces and allocator slack outside PyTorch's accounting, per GPU.
NON_TORCH_BYTES = GIB // 2
# Sampler profiling holds fp32 logits and probabilities for max_num_seqs rows.
LOGITS_COPIES = 2


def kv_dtype_bytes(model: ModelConfig, kv_cache_dtype: str = "auto") -> int:
    """Bytes per KV element: the model dtype for 'auto', else fp16/bf16 = 2, fp8 = 1."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r} not in {sorted(KV_CACHE_DTYPES)}")
    size = KV_CACHE_DTYPES[kv_cache_dtype]
    return model.dtype_bytes if size is None else size


def kv_bytes_per_token(model: ModelConfig, tp: int = 1, kv_cache_dtype: str = "auto") -> int:
    """KV bytes of one token on one GPU: 2 x layers x kv_heads_per_gpu x head_dim x dtype."""
    return (2 * model.num_layers * model.kv_heads_per_gpu(tp) * model.head_dim
            * kv_dtype_bytes(model, kv_cache_dtype))


def block_bytes(model: ModelConfig, block_size: int, tp: int = 1,
                kv_cache_dtype: str = "auto") -> int:
    """Bytes of one KV block (all layers) on one GPU."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return block_size * kv_bytes_per_token(model, tp, kv_cache_dtype)


def weight_bytes_per_gpu(model: ModelConfig, tp: int = 1) -> int:
    """Weights held by one GPU: every weight's bytes / tp (MoE: all experts, at their stored
    size; norms' replication ignored)."""
    model.check_tp(tp)
    return -(-model.weight_bytes // tp)


def activation_reserve_bytes(model: ModelConfig, tp: int = 1, max_num_batched_tokens: int = 8192,
                             max_num_seqs: int = 256) -> int:
    """Memory kept free for the forward pass, per GPU (vLLM measures it by profiling).

    reserve = NON_TORCH_BYTES (0.5 GiB)
            + max_num_batched_tokens x dtype x (2 x hidden + k x intermediate / tp)
            + max_num_seqs x vocab x 4 bytes x LOGITS_COPIES (2)
    The middle term is the MLP's peak for a full token budget: residual stream and normed input
    (2 x hidden) plus the up-projection output and its activation, k = 3 for gated MLPs
    (gate + up, then act) and 2 for OPT (fc1, then act).
    """
    model.check_tp(tp)
    per_token = 2 * model.hidden_size + (3 if model.gated_mlp else 2) * (
        model.intermediate_size // tp)
    forward = max_num_batched_tokens * model.dtype_bytes * per_token
    logits = max_num_seqs * model.vocab_size * 4 * LOGITS_COPIES
    return NON_TORCH_BYTES + forward + logits


def kv_cache_bytes(model: ModelConfig, gpu: GpuSpec, *, tp: int = 1,
                   gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192,
                   max_num_seqs: int = 256) -> int:
    """Bytes left for the KV cache on one GPU (may be <= 0 when the model does not fit)."""
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    budget = int(gpu.memory_bytes * gpu_memory_utilization)
    return (budget - weight_bytes_per_gpu(model, tp)
            - activation_reserve_bytes(model, tp, max_num_batched_tokens, max_num_seqs))


def token_slots(kv_bytes: int, model: ModelConfig, tp: int = 1,
                kv_cache_dtype: str = "auto") -> int:
    """How many tokens' KV fit in `kv_bytes` per GPU (paper Table 1's 'KV cache slots')."""
    return max(0, kv_bytes // kv_bytes_per_token(model, tp, kv_cache_dtype))


def num_cpu_blocks(swap_space_gib: float, bytes_per_block: int) -> int:
    """CPU swap blocks per GPU for --swap-space GiB."""
    if swap_space_gib < 0:
        raise ValueError(f"swap_space_gib must be >= 0, got {swap_space_gib}")
    return int(swap_space_gib * GIB) // bytes_per_block


@dataclass(frozen=True, slots=True, kw_only=True)
class KVCapacity:
    """The resolved KV pool. Byte figures are per GPU; num_gpu_blocks counts vLLM's null block."""

    block_size: int
    bytes_per_token: int
    block_bytes: int
    weight_bytes: int
    activation_reserve_bytes: int
    kv_cache_bytes: int
    num_gpu_blocks: int
    num_cpu_blocks: int
    overridden: bool

    @property
    def num_token_slots(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def describe(self) -> str:
        """One line for the resolved-configuration printout."""
        source = "--num-gpu-blocks" if self.overridden else "computed"
        return (f"KV cache: {self.num_gpu_blocks} GPU blocks ({source}) x {self.block_size} tokens"
                f" = {self.num_token_slots} slots, {self.bytes_per_token / 1024:.1f} KiB/token/GPU,"
                f" {self.kv_cache_bytes / GIB:.2f} GiB/GPU; weights "
                f"{self.weight_bytes / GIB:.2f} GiB/GPU, activation reserve "
                f"{self.activation_reserve_bytes / GIB:.2f} GiB/GPU; "
                f"{self.num_cpu_blocks} CPU blocks")


def plan_kv_capacity(model: ModelConfig, gpu: GpuSpec, *, block_size: int = 16, tp: int = 1,
                     gpu_memory_utilization: float = 0.9, kv_cache_dtype: str = "auto",
                     max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                     num_gpu_blocks_override: int | None = None,
                     swap_space_gib: float = 0.0) -> KVCapacity:
    """Size the KV pool for `model` on `tp` x `gpu`.

    Raises:
        ValueError: bad tp/dtype/utilization, or (without an override) no room for two blocks,
            the null block plus one usable block; the message gives the memory arithmetic.
    """
    per_block = block_bytes(model, block_size, tp, kv_cache_dtype)
    weights = weight_bytes_per_gpu(model, tp)
    reserve = activation_reserve_bytes(model, tp, max_num_batched_tokens, max_num_seqs)
    if num_gpu_blocks_override is not None:
        if num_gpu_blocks_override < 2:
            raise ValueError(f"num_gpu_blocks must be >= 2, got {num_gpu_blocks_override}")
        blocks, kv_bytes = num_gpu_blocks_override, num_gpu_blocks_override * per_block
    else:
        kv_bytes = kv_cache_bytes(model, gpu, tp=tp, gpu_memory_utilization=gpu_memory_utilization,
                                  max_num_batched_tokens=max_num_batched_tokens,
                                  max_num_seqs=max_num_seqs)
        blocks = max(0, kv_bytes // per_block)
        if blocks < 2:
            raise ValueError(
                f"model {model.name} does not fit on {tp} x {gpu.name}: "
                f"{gpu.memory_gib:g} GiB x {gpu_memory_utilization:g} - weights "
                f"{weights / GIB:.2f} GiB - activation reserve {reserve / GIB:.2f} GiB leaves "
                f"{kv_bytes / GIB:.2f} GiB per GPU for the KV cache; raise --tp or "
                "--gpu-memory-utilization, or use a larger GPU")
    return KVCapacity(block_size=block_size, bytes_per_token=per_block // block_size,
                      block_bytes=per_block, weight_bytes=weights,
                      activation_reserve_bytes=reserve, kv_cache_bytes=kv_bytes,
                      num_gpu_blocks=blocks,
                      num_cpu_blocks=num_cpu_blocks(swap_space_gib, per_block),
                      overridden=num_gpu_blocks_override is not None)
