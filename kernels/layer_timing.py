"""Per-layer attention timings on a CUDA device, for the benchmarks and the calibration artefact.

`AttentionTimer` holds one layer's paged K/V cache in the cache dtype (`kv_cache_dtype` as in
vLLM: "auto" = the model dtype, "bf16", "fp16" or "fp8", e4m3 with per-tensor scales) and
builds the calls of one step's attention: decode batches (any context lengths, ragged too),
extends (new tokens over cached prefixes) and mixed batches (decodes plus prefill chunks in one
launch). Block tables are random permutations of the cache's blocks. V is laid out as
`v_layout` says (kernels/cache_layout.py; "auto" follows V_TRANSPOSED_BY_DEFAULT). `*_us` return
the median microseconds of `triton.testing.do_bench` (L2 flushed before every run).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from triton.testing import do_bench, do_bench_cudagraph

from kernels.attention import paged_attention
from kernels.cache_layout import is_transposed_v, v_transposed_for, with_v_layout
from kernels.decode_attention import paged_decode_attention
from kernels.fp8 import FP8_DTYPE, quantize
from kernels.prefill_attention import paged_prefill_attention

KV_CACHE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                   "fp8": FP8_DTYPE, "fp8_e4m3": FP8_DTYPE}
Call = Callable[[], object]


@dataclass(frozen=True, slots=True)
class LayerShape:
    """One attention layer: heads, head size, page size and the model (query) dtype."""

    num_q_heads: int = 32
    num_kv_heads: int = 8
    head_size: int = 128
    block_size: int = 16
    dtype: torch.dtype = torch.bfloat16


def cache_dtype(kv_cache_dtype: str, dtype: torch.dtype) -> torch.dtype:
    """The torch dtype of a cache for vLLM's `--kv-cache-dtype` value."""
    if kv_cache_dtype == "auto":
        return dtype
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r}: expected auto or one of "
                         f"{sorted(KV_CACHE_DTYPES)}")
    return KV_CACHE_DTYPES[kv_cache_dtype]


def median_us(fn: Call, warmup: int = 25, rep: int = 100) -> float:
    """Median microseconds of `fn` (do_bench: events, L2 flushed before every run)."""
    fn()
    return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median")) * 1e3


def graph_us(fn: Call) -> float:
    """Median microseconds of `fn` replayed from a CUDA graph."""
    fn()
    return float(do_bench_cudagraph(fn, return_mode="median")) * 1e3


def host_us(fn: Call, calls: int = 200) -> float:
    """Wall time per call of `calls` back-to-back launches (the host cost when it dominates)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


class AttentionTimer:
    """A paged cache of `num_blocks` blocks and the calls that time one layer's attention."""

    def __init__(self, shape: LayerShape, num_blocks: int, kv_cache_dtype: str = "auto",
                 device: str = "cuda", seed: int = 0, k_scale: float = 0.05,
                 v_scale: float = 0.05, v_layout: str = "auto") -> None:
        self.shape, self.device = shape, torch.device(device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.kv_dtype = cache_dtype(kv_cache_dtype, shape.dtype)
        fp8 = self.kv_dtype == FP8_DTYPE
        self.k_scale, self.v_scale = (k_scale, v_scale) if fp8 else (1.0, 1.0)
        dims = (num_blocks, shape.block_size, shape.num_kv_heads, shape.head_size)
        self.k = self._values(dims, self.k_scale, fp8)
        self.v = self._values(dims, self.v_scale, fp8)
        if v_transposed_for(self.kv_dtype, v_layout):
            self.v = with_v_layout(self.v, "transposed")

    def relaid(self, v_layout: str) -> AttentionTimer:
        """The same timer (K, block tables' generator state aside) over a copy of V laid out
        as `v_layout` ("token_major" or "transposed")."""
        other = copy.copy(self)
        other.gen = torch.Generator(device=self.device).manual_seed(self.gen.initial_seed())
        other.v = with_v_layout(self.v, v_layout)
        return other

    @property
    def v_layout(self) -> str:
        return "transposed" if is_transposed_v(self.v) else "token_major"

    def _values(self, dims: tuple[int, ...], scale: float, fp8: bool) -> torch.Tensor:
        x = torch.randn(dims, device=self.device, generator=self.gen, dtype=self.shape.dtype)
        return quantize(x, scale) if fp8 else x.to(self.kv_dtype)

    def tables(self, lens: list[int]) -> torch.Tensor:
        """int32 block tables for `lens`, over distinct randomly permuted blocks (not 0)."""
        bs = self.shape.block_size
        need = [-(-n // bs) for n in lens]
        if sum(need) >= self.k.shape[0]:
            raise ValueError(f"{sum(need)} blocks needed, the cache has {self.k.shape[0] - 1}")
        ids = torch.randperm(self.k.shape[0] - 1, device=self.device, generator=self.gen) + 1
        table = torch.zeros((len(lens), max(need + [1])), dtype=torch.int32, device=self.device)
        start = 0
        for i, n in enumerate(need):
            table[i, :n] = ids[start:start + n].to(torch.int32)
            start += n
        return table

    def queries(self, tokens: int) -> torch.Tensor:
        s = self.shape
        return torch.randn((tokens, s.num_q_heads, s.head_size), device=self.device,
                           generator=self.gen, dtype=s.dtype)

    def _ints(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=self.device)

    def decode_call(self, lens: list[int], **kw: object) -> Call:
        """One decode step over `lens` (each length includes the new token)."""
        q, tables, ctx = self.queries(len(lens)), self.tables(lens), self._ints(lens)
        out = torch.empty_like(q)
        fn = kw.pop("fn", paged_decode_attention)
        if self.kv_dtype == FP8_DTYPE:
            kw.update(k_scale=self.k_scale, v_scale=self.v_scale)
        most = max(lens)
        return lambda: fn(q, self.k, self.v, tables, ctx, max_context_len=most, out=out, **kw)

    def extend_call(self, new: list[int], prefixes: list[int], **kw: object) -> Call:
        """New tokens `new[i]` after `prefixes[i]` cached ones, per sequence."""
        lens = [n + p for n, p in zip(new, prefixes)]
        q, tables, ctx = self.queries(sum(new)), self.tables(lens), self._ints(lens)
        starts = self._ints([sum(new[:i]) for i in range(len(new) + 1)])
        out = torch.empty_like(q)
        most_new, most = max(new), max(lens)
        return lambda: paged_prefill_attention(q, self.k, self.v, tables, starts, ctx,
                                               max_new_tokens=most_new,
                                               max_context_len=most, out=out,
                                               k_scale=self.k_scale, v_scale=self.v_scale, **kw)

    def mixed_call(self, decode_lens: list[int], new: list[int], prefixes: list[int],
                   **kw: object) -> Call:
        """Decodes then prefill chunks, in one launch (`paged_attention`)."""
        news = [1] * len(decode_lens) + new
        lens = decode_lens + [n + p for n, p in zip(new, prefixes)]
        q, tables, ctx = self.queries(sum(news)), self.tables(lens), self._ints(lens)
        starts = self._ints([sum(news[:i]) for i in range(len(news) + 1)])
        out = torch.empty_like(q)
        most_new, most = max(news), max(lens)
        return lambda: paged_attention(q, self.k, self.v, tables, starts, ctx,
                                       num_small_seqs=len(decode_lens), max_query_len=most_new,
                                       max_context_len=most, out=out, k_scale=self.k_scale,
                                       v_scale=self.v_scale, **kw)

    def decode_us(self, lens: list[int], **kw: object) -> float:
        """Per-layer decode attention time for context lengths `lens`."""
        return median_us(self.decode_call(lens, **kw))

    def extend_us(self, new: list[int], prefixes: list[int], **kw: object) -> float:
        """Per-layer prefill/extend attention time."""
        return median_us(self.extend_call(new, prefixes, **kw))

    def mixed_us(self, decode_lens: list[int], new: list[int], prefixes: list[int],
                 **kw: object) -> float:
        """Per-layer attention time of a mixed batch in one launch."""
        return median_us(self.mixed_call(decode_lens, new, prefixes, **kw))

    def kv_bytes(self, lens: list[int]) -> int:
        """K and V bytes a step over `lens` reads once."""
        s = self.shape
        return 2 * sum(lens) * s.num_kv_heads * s.head_size * self.k.element_size()
