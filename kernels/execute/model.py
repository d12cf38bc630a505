"""The model an executed step runs on: random weights at the real shapes, and the paged KV cache.

Weights (normal, std 0.02; norms 1) are drawn for ONE decoder layer, which every layer uses:
the shapes are equal and a layer's weights far exceed the GPU's L2, so each layer still streams
them from HBM. The KV cache, `[layers, 2, num_blocks, block_size, kv_heads, head_dim]` at the
logged pool size, is random; when it does not fit beside the weights and a reserve, `kv_layers`
layers are allocated and layer l uses cache `l % kv_layers`. A host cache (zeros) serves swaps.
An fp8 cache is `float8_e4m3fn`, filled quantised by its K and V scales (kernels/fp8.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kernels.cache_layout import as_v_layout, v_transposed_for
from kernels.execute.arch import Architecture
from kernels.execute.fused import rope_cache
from kernels.fp8 import FP8_DTYPE, inv_scale, quantize

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
GiB = 1 << 30
FILL_CHUNK = 1 << 26  # values drawn at a time into an fp8 cache (a few 256 MB temporaries)


@dataclass(slots=True)
class LayerWeights:
    """One decoder layer's weights, `[out_features, in_features]` as nn.Linear keeps them."""

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    ln1: torch.Tensor
    ln2: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    up: torch.Tensor | None  # dense: [2I, h] gated (gate rows first) or [I, h] plain
    down: torch.Tensor | None  # dense: [h, I]
    router: torch.Tensor | None = None  # [E, h]
    experts_up: torch.Tensor | None = None  # [E, 2Ie, h]
    experts_down: torch.Tensor | None = None  # [E, h, Ie]
    shared_up: torch.Tensor | None = None  # [2Is, h]
    shared_down: torch.Tensor | None = None  # [h, Is]
    sinks: torch.Tensor | None = None  # [num_heads] float32 logits (attention_sinks)


def _draw(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
          gen: torch.Generator) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device).normal_(0.0, 0.02, generator=gen)


def make_layer(arch: Architecture, dtype: torch.dtype, device: torch.device,
               gen: torch.Generator) -> LayerWeights:
    """Random weights of one layer of `arch`."""
    h, d = arch.hidden_size, arch.head_dim
    qkv_rows = (arch.num_heads + 2 * arch.num_kv_heads) * d
    ones = torch.ones(h, dtype=dtype, device=device)
    head_ones = torch.ones(d, dtype=dtype, device=device) if arch.qk_norm else None
    dense = not arch.moe
    width = (2 if arch.gated_mlp else 1) * arch.intermediate_size
    w = LayerWeights(
        qkv=_draw((qkv_rows, h), dtype, device, gen),
        qkv_bias=_draw((qkv_rows,), dtype, device, gen) if arch.qkv_bias else None,
        o=_draw((h, arch.num_heads * d), dtype, device, gen), ln1=ones, ln2=ones.clone(),
        q_norm=head_ones, k_norm=head_ones,
        up=_draw((width, h), dtype, device, gen) if dense else None,
        down=_draw((h, arch.intermediate_size), dtype, device, gen) if dense else None)
    if arch.moe:
        e, ie, shared = arch.num_experts, arch.moe_intermediate_size, \
            arch.shared_expert_intermediate_size
        w.router = _draw((e, h), dtype, device, gen)
        w.experts_up = _draw((e, 2 * ie, h), dtype, device, gen)
        w.experts_down = _draw((e, h, ie), dtype, device, gen)
        if shared:
            w.shared_up = _draw((2 * shared, h), dtype, device, gen)
            w.shared_down = _draw((h, shared), dtype, device, gen)
    if arch.attention_sinks:
        w.sinks = torch.empty(arch.num_heads, dtype=torch.float32,
                              device=device).normal_(generator=gen)
    return w


def kv_layers_that_fit(arch: Architecture, per_layer: int, device: torch.device,
                       reserve_bytes: int) -> int:
    """All layers when their caches fit in free memory less `reserve_bytes`, else fewer."""
    if device.type != "cuda":
        return arch.num_layers if per_layer * arch.num_layers <= 2 * GiB else 1
    free, _ = torch.cuda.mem_get_info(device)
    return max(0, min(arch.num_layers, (free - reserve_bytes) // max(per_layer, 1)))


@dataclass(slots=True)
class Engine:
    """Weights, rotary table and KV caches of one logged section (or one calibration grid)."""

    arch: Architecture
    block_size: int
    num_gpu_blocks: int
    num_cpu_blocks: int
    device: torch.device
    seed: int = 0
    kv_layers: int | None = None
    reserve_bytes: int = 6 * GiB
    k_scale: float = 1.0
    v_scale: float = 1.0
    dtype: torch.dtype = field(init=False)
    kv_dtype: torch.dtype = field(init=False)
    layer: LayerWeights = field(init=False)
    embed: torch.Tensor = field(init=False)
    lm_head: torch.Tensor = field(init=False)
    final_norm: torch.Tensor = field(init=False)
    cos_sin: torch.Tensor | None = field(init=False, default=None)
    kv: torch.Tensor = field(init=False)
    cpu_kv: torch.Tensor | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        a = self.arch
        inv_scale(self.k_scale)  # a bad scale is refused before anything is allocated
        inv_scale(self.v_scale)
        self.dtype = TORCH_DTYPES[a.dtype]
        self.kv_dtype = FP8_DTYPE if a.fp8_kv else self.dtype
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        self.layer = make_layer(a, self.dtype, self.device, gen)
        self.embed = _draw((a.vocab_size, a.hidden_size), self.dtype, self.device, gen)
        self.lm_head = _draw((a.vocab_size, a.hidden_size), self.dtype, self.device, gen)
        self.final_norm = torch.ones(a.hidden_size, dtype=self.dtype, device=self.device)
        self._allocate_kv(gen)

    def _allocate_kv(self, gen: torch.Generator) -> None:
        a = self.arch
        block = (self.block_size, a.num_kv_heads, a.head_dim)
        elem = torch.empty(0, dtype=self.kv_dtype).element_size()
        per_layer = 2 * self.num_gpu_blocks * self.block_size * a.num_kv_heads * a.head_dim * elem
        n = self.kv_layers or kv_layers_that_fit(a, per_layer, self.device, self.reserve_bytes)
        if n < 1:
            raise ValueError(f"the KV cache of one layer ({per_layer / GiB:.1f} GiB at "
                             f"{self.num_gpu_blocks} blocks) does not fit on {self.device}")
        self.kv_layers = min(n, a.num_layers)
        self.kv = torch.empty((self.kv_layers, 2, self.num_gpu_blocks, *block),
                              dtype=self.kv_dtype, device=self.device)
        self._fill_kv(gen)
        if self.num_cpu_blocks:
            host_layers = max(1, min(self.kv_layers, 16 * GiB // max(per_layer, 1)))
            self.cpu_kv = torch.zeros((host_layers, 2, self.num_cpu_blocks, *block),
                                      dtype=self.kv_dtype,
                                      pin_memory=self.device.type == "cuda")

    def _fill_kv(self, gen: torch.Generator) -> None:
        """Standard normal values; an fp8 cache gets them quantised by K's or V's scale, drawn
        a chunk at a time (a whole cache of model-dtype values would not fit beside it)."""
        if self.kv_dtype != FP8_DTYPE:
            self.kv.normal_(generator=gen)
            return
        for pair in self.kv:
            for half, scale in zip(pair, (self.k_scale, self.v_scale)):
                flat = half.view(-1)
                for start in range(0, flat.numel(), FILL_CHUNK):
                    n = min(FILL_CHUNK, flat.numel() - start)
                    x = torch.empty(n, dtype=self.dtype, device=self.device)
                    flat[start : start + n] = quantize(x.normal_(generator=gen), scale)

    def cache(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(K, V) cache `[num_blocks, block_size, kv_heads, head_dim]` of `layer`; V laid out
        as cache_layout.V_TRANSPOSED_BY_DEFAULT says for its dtype."""
        pair = self.kv[layer % self.kv.shape[0]]
        return pair[0], as_v_layout(pair[1])

    def cpu_cache(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(K, V) host cache of `layer` (swaps)."""
        if self.cpu_kv is None:
            raise ValueError("swaps logged but the header has num_cpu_blocks = 0")
        pair = self.cpu_kv[layer % self.cpu_kv.shape[0]]
        return pair[0], pair[1]

    def rope(self, max_position: int) -> torch.Tensor:
        """The rotary table covering positions [0, max_position] (grown by doubling)."""
        theta = self.arch.rope_theta
        if theta is None:
            raise ValueError(f"model {self.arch.name}: no rotary embedding (rope_theta null)")
        if self.cos_sin is None or self.cos_sin.shape[0] <= max_position:
            size = 1 << max(12, max_position.bit_length())
            self.cos_sin = rope_cache(theta, self.arch.head_dim, size, self.device)
        return self.cos_sin

    def memory(self) -> dict[str, Any]:
        """What was allocated, for the output header."""
        return {"kv_layers": self.kv_layers, "num_layers": self.arch.num_layers,
                "kv_bytes": self.kv.numel() * self.kv.element_size(),
                "kv_dtype": str(self.kv.dtype).removeprefix("torch."),
                "v_layout": "transposed" if v_transposed_for(self.kv.dtype) else "token_major",
                "k_scale": self.k_scale, "v_scale": self.v_scale,
                "kv_all_layers": self.kv_layers == self.arch.num_layers,
                "cpu_kv_layers": 0 if self.cpu_kv is None else self.cpu_kv.shape[0],
                "weights": "one layer's random weights reused by every layer"}
