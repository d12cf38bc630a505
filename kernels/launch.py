"""Shared plumbing for the Triton wrappers: device dispatch, block tables and argument checks.

Triton decides at decoration time whether `@triton.jit` builds a compiled kernel or an
interpreted one (TRITON_INTERPRET). pagedsim's kernels are used on both CPU tensors (CI, under
the interpreter) and CUDA tensors (the H200), possibly in one process, so `for_device` picks the
variant per launch: CPU tensors always run through Triton's interpreter, CUDA tensors always
through the compiler, whatever the environment said when triton was imported. (Triton's own
helpers such as `tl.zeros` and `tl.max` are jit functions too; `_Interpreted` runs them
interpreted while one of our kernels is being interpreted.)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from kernels.cache_layout import is_transposed_v

_VARIANTS: dict[tuple[Any, bool], Any] = {}
_HELPERS: dict[Any, InterpretedFunction] = {}


def _call_interpreted(self: JITFunction, *args: Any, **kwargs: Any) -> Any:
    helper = _HELPERS.get(self.fn)
    if helper is None:
        helper = _HELPERS[self.fn] = InterpretedFunction(self.fn)
    return helper(*args, **kwargs)


class _Interpreted(InterpretedFunction):
    """Interpreted kernel whose calls to compiled-mode jit helpers are interpreted as well."""

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        saved = JITFunction.__call__
        JITFunction.__call__ = _call_interpreted  # type: ignore[method-assign]
        try:
            return super().run(*args, grid=grid, warmup=warmup, **kwargs)
        finally:
            JITFunction.__call__ = saved  # type: ignore[method-assign]


SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
CACHE_DTYPES = (*SUPPORTED_DTYPES, torch.float8_e4m3fn)


def for_device(kernel: Any, device: torch.device) -> Any:
    """Return the launchable variant of `kernel` for tensors on `device` (cached per function)."""
    interpret = device.type == "cpu"
    key = (kernel.fn, interpret)
    variant = _VARIANTS.get(key)
    if variant is None:
        if interpret:
            variant = _Interpreted(kernel.fn)
        else:
            variant = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn)
        _VARIANTS[key] = variant
    return variant


def as_int_tensor(
    values: torch.Tensor | Sequence[int],
    device: torch.device,
    name: str,
    dtype: torch.dtype = torch.int32,
) -> torch.Tensor:
    """Convert a list of ints or an integer tensor to a 1-D contiguous tensor on `device`."""
    if isinstance(values, torch.Tensor):
        if (
            values.dtype == dtype
            and values.device == device
            and values.dim() == 1
            and values.is_contiguous()
        ):
            return values
        if values.dim() != 1 or values.dtype not in (torch.int32, torch.int64):
            raise ValueError(
                f"{name}: expected a 1-D int32/int64 tensor, "
                f"got {values.dtype} {tuple(values.shape)}"
            )
        if values.device != device:
            raise ValueError(f"{name}: on {values.device}, expected {device}")
        return values.to(dtype).contiguous()
    return torch.tensor(list(values), dtype=dtype, device=device)


def as_block_tables(
    block_tables: torch.Tensor | Sequence[Sequence[int]], device: torch.device
) -> torch.Tensor:
    """Return block tables as an int32 `[num_seqs, max_blocks]` tensor, rows padded with block 0.

    Block 0 is the allocator's null block, so padding never points outside the cache; kernels
    only read entries below each sequence's context length anyway.
    """
    if isinstance(block_tables, torch.Tensor):
        if block_tables.dim() != 2 or block_tables.dtype != torch.int32:
            raise ValueError(
                f"block_tables: expected a 2-D int32 tensor, got {block_tables.dtype} "
                f"{tuple(block_tables.shape)}"
            )
        if block_tables.device != device:
            raise ValueError(f"block_tables: on {block_tables.device}, expected {device}")
        if block_tables.stride(1) != 1:
            raise ValueError("block_tables: the block dimension must be contiguous (stride 1)")
        return block_tables
    rows = [list(row) for row in block_tables]
    width = max([len(row) for row in rows] + [1])
    table = torch.zeros((len(rows), width), dtype=torch.int32)
    for i, row in enumerate(rows):
        if row:
            table[i, : len(row)] = torch.tensor(row, dtype=torch.int32)
    return table.to(device)


def check_kv_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int, int]:
    """Check the paged cache pair and return (num_blocks, block_size, num_kv_heads, head_size).

    Layout: `[num_blocks, block_size, num_kv_heads, head_size]` for K and V separately (vLLM's
    flash layout); the head dimension must be contiguous so that a token's head row is one run,
    except in a V cache stored transposed per block (kernels/cache_layout.py).
    """
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(
            f"caches: expected equal 4-D shapes, "
            f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if k_cache.dtype != v_cache.dtype or k_cache.dtype not in CACHE_DTYPES:
        raise ValueError(f"caches: dtypes {k_cache.dtype}/{v_cache.dtype} unsupported or different")
    if k_cache.device != v_cache.device:
        raise ValueError("caches: K and V on different devices")
    if k_cache.stride()[3] != 1 or not (v_cache.stride()[3] == 1 or is_transposed_v(v_cache)):
        raise ValueError("caches: head_size dimension must be contiguous (stride 1), or V "
                         "stored transposed per block (kernels/cache_layout.py)")
    num_blocks, block_size, num_kv_heads, head_size = k_cache.shape
    return num_blocks, block_size, num_kv_heads, head_size


def kernel_block_view(cache: torch.Tensor, kernel_block_size: int | None) -> torch.Tensor:
    """The cache `[num_blocks, block_size, ...]` seen as kernel blocks of `kernel_block_size`.

    Manager block b of `block_size` tokens is kernel blocks b * r .. b * r + r - 1 with
    r = block_size // kernel_block_size, the ids `BlockTable.map_to_kernel_blocks` gives
    (allocator/block_table.py); a view, never a copy, so writes land in the caller's cache.
    """
    if kernel_block_size is None or kernel_block_size == cache.shape[1]:
        return cache
    if kernel_block_size < 1 or cache.shape[1] % kernel_block_size:
        raise ValueError(f"kernel_block_size {kernel_block_size} must divide the cache's block "
                         f"size {cache.shape[1]}")
    if is_transposed_v(cache):
        raise ValueError("kernel_block_size: a V cache stored transposed per block cannot be "
                         "read as smaller kernel blocks; allocate V token-major "
                         "(cache_layout.new_kv_cache(..., v_layout='token_major'))")
    ratio = cache.shape[1] // kernel_block_size
    try:
        return cache.view(cache.shape[0] * ratio, kernel_block_size, *cache.shape[2:])
    except RuntimeError:
        raise ValueError("caches: kernel blocks need each block's tokens contiguous") from None


def check_head_size(head_size: int) -> None:
    """Head sizes must be powers of two in [16, 256] (tl.arange needs a power of two)."""
    if head_size < 16 or head_size > 256 or head_size & (head_size - 1):
        raise ValueError(f"head_size {head_size} unsupported: need a power of two in [16, 256]")


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 operands use IEEE products (no TF32 rounding); 16-bit operands are exact anyway."""
    return "ieee" if dtype == torch.float32 else "tf32"


def split_p(dtype: torch.dtype) -> bool:
    """True where decode sends softmax probabilities through the P.V dot as a bf16 pair.

    Rounding P to bf16 (8 significant bits) costs up to 2^-8 relative per weight, on top of the
    2^-8 of rounding the output itself; together they reached 8e-3 of max|ref| on tiny random
    cases. With `lo = bf16(p - hi)` the weights keep ~16 bits for one extra tensor-core dot,
    which a memory-bound decode kernel gets for free. fp16 (11 bits) and fp32 need no split.
    Prefill leaves it off by default (PrefillConfig.split_p), where it costs 35%.
    """
    return dtype == torch.bfloat16


@triton.jit
def round_to_bf16(x):
    """fp32 `x` rounded to the nearest bf16 value (ties to even), still held in fp32.

    Only for kernels running under the interpreter (UPCAST_DOT), whose fp32 -> bf16 cast
    truncates where the GPU rounds to nearest: rounding first makes the cast exact, so CPU
    tests see the GPU's numerics.
    """
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def accumulate_pv(acc, p, v, UPCAST_DOT: tl.constexpr, SPLIT_P: tl.constexpr,
                  DOT_PRECISION: tl.constexpr):
    """`acc + p @ v` for fp32 probabilities `p` and a tile of V in the cache dtype.

    With SPLIT_P the probabilities go through the dot as a hi + lo pair of the cache dtype, so
    rounding p to bf16/fp16 costs no accuracy; under the interpreter (UPCAST_DOT) the operands
    are widened to fp32 and rounded the GPU's way first.
    """
    if UPCAST_DOT:
        v = v.to(tl.float32)
        p_hi = round_to_bf16(p)
        p_lo = round_to_bf16(p - p_hi)
    else:
        p_hi = p.to(v.dtype)
        p_lo = (p - p_hi.to(tl.float32)).to(v.dtype)
    acc = tl.dot(p_hi, v, acc, input_precision=DOT_PRECISION)
    if SPLIT_P:
        acc = tl.dot(p_lo, v, acc, input_precision=DOT_PRECISION)
    return acc


def upcast_dot(x: torch.Tensor) -> bool:
    """True where dot operands must be widened to fp32 before `tl.dot`.

    Triton's interpreter keeps bf16 data as raw uint16 and its dot multiplies those integers,
    so under the interpreter bf16 operands are widened first. That is exact: bf16 products
    are exact in fp32, the accumulation is fp32 either way. Compiled kernels never widen.
    """
    return x.device.type == "cpu" and x.dtype == torch.bfloat16


def num_sms(device: torch.device) -> int:
    """Multiprocessor count of a CUDA device; a nominal 4 for the CPU interpreter."""
    if device.type != "cuda":
        return 4
    return _cuda_sms(torch.cuda.current_device() if device.index is None else device.index)


@functools.cache
def _cuda_sms(index: int) -> int:
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return int(triton.next_power_of_2(max(1, n)))
