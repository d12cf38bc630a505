"""Write new K/V rows into the paged cache at their slots (vLLM's reshape_and_cache).

Each token's `[num_kv_heads, head_size]` row is one contiguous run both in the projection
output and in the cache slot, so a program copies a `[BLOCK_T, BLOCK_R]` tile of rows with
16-byte vector loads and stores. A slot of -1 marks a padding token: its row is skipped.
An fp8 cache is written quantised, `x / k_scale` and `x / v_scale` (kernels/fp8.py). A V
cache stored transposed per block (kernels/cache_layout.py) takes a row's elements
`block_size` apart: `(head, dim)` of a slot sits at `(head * head_size + dim) * block_size`.

    slot = block_id * block_size + offset      (block_id from the sequence's block table)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.cache_layout import is_transposed_v
from kernels.fp8 import inv_scale, is_fp8, to_e4m3
from kernels.launch import (
    SUPPORTED_DTYPES,
    as_int_tensor,
    check_kv_cache,
    for_device,
    kernel_block_view,
    next_power_of_2,
)

TILE_ELEMENTS = 2048


@triton.jit
def _reshape_and_cache_kernel(
    key_ptr,  # [num_tokens, num_kv_heads, head_size]
    value_ptr,  # [num_tokens, num_kv_heads, head_size]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_size]
    v_cache_ptr,
    slot_mapping_ptr,  # [num_tokens]
    num_tokens,
    k_inv,
    v_inv,
    stride_kt,
    stride_vt,
    stride_kcb,
    stride_kct,
    stride_vcb,
    stride_vct,
    ROW_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_R: tl.constexpr,
    FP8: tl.constexpr,
    ROUND: tl.constexpr,
    V_ELEM: tl.constexpr,  # V's element stride within a slot's row: 1, or block_size
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    slot = tl.load(slot_mapping_ptr + offs_t, mask=offs_t < num_tokens, other=-1).to(tl.int64)
    block_id = slot // BLOCK_SIZE
    block_off = slot % BLOCK_SIZE
    mask = (slot >= 0)[:, None] & (offs_r < ROW_SIZE)[None, :]
    src_t = offs_t.to(tl.int64)[:, None]
    key = tl.load(key_ptr + src_t * stride_kt + offs_r[None, :], mask=mask)
    if FP8:
        key = to_e4m3(key, k_inv, ROUND)
    kc_row = (block_id * stride_kcb + block_off * stride_kct)[:, None]
    tl.store(k_cache_ptr + kc_row + offs_r[None, :], key, mask=mask)
    value = tl.load(value_ptr + src_t * stride_vt + offs_r[None, :], mask=mask)
    if FP8:
        value = to_e4m3(value, v_inv, ROUND)
    vc_row = (block_id * stride_vcb + block_off * stride_vct)[:, None]
    tl.store(v_cache_ptr + vc_row + offs_r[None, :] * V_ELEM, value, mask=mask)


def _check_rows(name: str, x: torch.Tensor, cache: torch.Tensor) -> None:
    if x.dim() != 3 or tuple(x.shape[1:]) != tuple(cache.shape[2:]):
        raise ValueError(
            f"{name}: expected [num_tokens, {cache.shape[2]}, {cache.shape[3]}], "
            f"got {tuple(x.shape)}"
        )
    if (x.dtype != cache.dtype and not (is_fp8(cache.dtype) and x.dtype in SUPPORTED_DTYPES)
            or x.device != cache.device):
        raise ValueError(f"{name}: dtype/device {x.dtype}/{x.device} differ from the cache's")
    if x.stride(2) != 1 or x.stride(1) != x.shape[2]:
        raise ValueError(f"{name}: each token's [num_kv_heads, head_size] row must be contiguous")


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor | list[int],
    *,
    tile_elements: int = TILE_ELEMENTS,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    kernel_block_size: int | None = None,
) -> None:
    """Scatter `key`/`value` rows into `k_cache`/`v_cache` in place.

    Args:
        key, value: `[num_tokens, num_kv_heads, head_size]`; the token stride may be anything
            (e.g. a slice of a fused QKV output), the rest must be contiguous.
        k_cache, v_cache: `[num_blocks, block_size, num_kv_heads, head_size]`; V may be
            stored transposed per block (kernels/cache_layout.py).
        slot_mapping: `[num_tokens]` slot ids; -1 skips the token.
        tile_elements: elements of K (and of V) one program moves; a tuning knob.
        k_scale, v_scale: per-tensor scales of an fp8 cache (ignored otherwise).
        kernel_block_size: slots name kernel blocks of this size (the same slot ids: a
            manager block's kernel blocks are consecutive, see `launch.kernel_block_view`).

    Raises:
        ValueError: on shape, dtype, device or stride mismatches.
    """
    k_cache = kernel_block_view(k_cache, kernel_block_size)
    v_cache = kernel_block_view(v_cache, kernel_block_size)
    _, block_size, num_kv_heads, head_size = check_kv_cache(k_cache, v_cache)
    _check_rows("key", key, k_cache)
    _check_rows("value", value, v_cache)
    v_t = is_transposed_v(v_cache)
    if k_cache.stride(2) != head_size or not (v_cache.stride(2) == head_size or v_t):
        raise ValueError("caches: each slot's [num_kv_heads, head_size] row must be contiguous "
                         "(V may be stored transposed per block: kernels/cache_layout.py)")
    num_tokens = key.shape[0]
    if value.shape[0] != num_tokens:
        raise ValueError(f"value: {value.shape[0]} tokens, key has {num_tokens}")
    slots = as_int_tensor(slot_mapping, key.device, "slot_mapping", torch.int64)
    if slots.numel() != num_tokens:
        raise ValueError(f"slot_mapping: {slots.numel()} entries for {num_tokens} tokens")
    if num_tokens == 0:
        return
    row_size = num_kv_heads * head_size
    block_r = min(next_power_of_2(row_size), tile_elements)
    block_t = max(1, tile_elements // block_r)
    grid = (triton.cdiv(num_tokens, block_t), triton.cdiv(row_size, block_r))
    for_device(_reshape_and_cache_kernel, key.device)[grid](
        key,
        value,
        k_cache,
        v_cache,
        slots,
        num_tokens,
        inv_scale(k_scale),
        inv_scale(v_scale),
        key.stride(0),
        value.stride(0),
        k_cache.stride(0),
        k_cache.stride(1),
        v_cache.stride(0),
        v_cache.stride(1),
        ROW_SIZE=row_size,
        BLOCK_SIZE=block_size,
        BLOCK_T=block_t,
        BLOCK_R=block_r,
        FP8=is_fp8(k_cache.dtype),
        ROUND=key.device.type == "cpu",
        V_ELEM=block_size if v_t else 1,
        num_warps=4,
    )
