"""The head layout a validation runs with, and the paged caches it runs on (the memory check).

On CUDA the K and V caches of *all* layers are allocated at the simulated pool size and
dtype, `[num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]`, to show that the
simulated capacity is real on this GPU; layer 0 of that allocation is the cache the replay
uses. The report gives the bytes and the free memory left (`torch.cuda.mem_get_info`). On
the CPU, or with a shrunk layout, only one layer is allocated and the all-layer bytes are
computed. Unwritten rows are NaN, so a kernel that reads a slot nobody wrote fails loudly.
An fp8 log (`LogHeader.kv_cache_dtype`) gets fp8 e4m3 caches written with the log's scales;
queries and the K/V rows before quantisation are in the model dtype.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

import torch

from kernels.cache_layout import as_v_layout, is_transposed_v, new_kv_cache
from kernels.fp8 import FP8_DTYPE
from kernels.swap import allocate_cpu_cache
from kernels.validate.kv_content import KVContent
from kernels.validate.log import LogHeader
from kernels.validate.state import Replay

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass(frozen=True, slots=True)
class LayoutSummary:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    real: bool


@dataclass(frozen=True, slots=True)
class Layout:
    """Heads, head size and dtypes (model, cache) of the one validated layer; `real` if as in
    the log."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    real: bool
    kv_dtype: torch.dtype

    @classmethod
    def from_header(cls, hdr: LogHeader, dtype: str | None, max_kv_heads: int | None,
                    head_dim: int | None) -> Layout:
        """The log's layout, optionally shrunk (KV heads capped, GQA ratio kept) for CPU runs."""
        kv = hdr.num_kv_heads if max_kv_heads is None else max(1, min(hdr.num_kv_heads,
                                                                         max_kv_heads))
        dim = hdr.head_dim if head_dim is None else head_dim
        torch_dtype = TORCH_DTYPES[dtype or hdr.dtype]
        real = (kv, dim, torch_dtype) == (hdr.num_kv_heads, hdr.head_dim, TORCH_DTYPES[hdr.dtype])
        kv_dtype = FP8_DTYPE if hdr.kv_cache_dtype else torch_dtype
        return cls(kv * (hdr.num_heads // hdr.num_kv_heads), kv, dim, torch_dtype, real, kv_dtype)

    def summary(self) -> LayoutSummary:
        return LayoutSummary(self.num_heads, self.num_kv_heads, self.head_dim, self.real)


def _all_layer_bytes(hdr: LogHeader) -> int:
    elem = 1 if hdr.kv_cache_dtype else torch.empty(0, dtype=TORCH_DTYPES[hdr.dtype]).element_size()
    return (2 * hdr.num_layers * hdr.num_gpu_blocks * hdr.block_size * hdr.num_kv_heads
            * hdr.head_dim * elem)


def _caches(hdr: LogHeader, layout: Layout, device: torch.device, fill: float
            ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    shape = (hdr.num_gpu_blocks, hdr.block_size, layout.num_kv_heads, layout.head_dim)
    memory: dict[str, Any] = {"all_layers_bytes": _all_layer_bytes(hdr), "allocated": False}
    if device.type == "cuda" and layout.real:
        # An earlier section's caches may still sit in a reference cycle: collect them and
        # hand their memory back before judging whether this pool fits.
        gc.collect()
        torch.cuda.empty_cache()
        try:
            pool = torch.empty((hdr.num_layers, 2, *shape), dtype=layout.kv_dtype, device=device)
        except torch.cuda.OutOfMemoryError:
            memory["fits"] = False
        else:
            memory.update(allocated=True, fits=True)
            k, v = pool[0, 0], as_v_layout(pool[0, 1])
    if not memory["allocated"]:
        k, v = new_kv_cache(*shape, layout.kv_dtype, device)
    memory["v_layout"] = "transposed" if is_transposed_v(v) else "token_major"
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        memory.update(free_after_bytes=free, device_total_bytes=total)
    k.fill_(fill)
    v.fill_(fill)
    return k, v, memory


def make_replay(hdr: LogHeader, layout: Layout, device: torch.device, poison: bool = True
                ) -> tuple[Replay, dict[str, Any]]:
    """The replay state for one section, and the memory check's figures.

    `poison=False` fills unwritten rows with zeros instead of NaN (tests use it to show that
    a mutation is caught by the attention values themselves, not by a NaN).
    """
    fill = float("nan") if poison else 0.0
    k, v, memory = _caches(hdr, layout, device, fill)
    k_cpu = v_cpu = None
    if hdr.num_cpu_blocks > 0:
        k_cpu = allocate_cpu_cache(k, hdr.num_cpu_blocks).fill_(fill)
        v_cpu = allocate_cpu_cache(v, hdr.num_cpu_blocks).fill_(fill)
    content = KVContent(layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.dtype,
                        device)
    return Replay(content, hdr.block_size, k, v, k_cpu, v_cpu, hdr.seed, hdr.k_scale,
                  hdr.v_scale), memory
