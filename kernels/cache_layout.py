"""The two layouts of a paged V cache, and allocation of (K, V) cache pairs.

Every cache is indexed `[num_blocks, block_size, num_kv_heads, head_size]`. K is always stored
that way (token-major: a token's heads are one run). V may instead be stored transposed within
each block, `[num_blocks, num_kv_heads, head_size, block_size]` in memory, seen through a
permuted view of the same logical shape, so torch code (references, swaps, validation reads)
indexes it as it indexes K. In that layout a block's tokens of one (head, dimension) are
contiguous and a V tile enters `P @ V`, which contracts over tokens, as K enters `q @ K^T`:
the attention kernel loads each block's `[head_size, block_size]` slice as its own axis. It is
meant for fp8 caches: on the H200 their decode is bound by instruction issue, and the widened
token-major V tile makes a second trip through shared memory to reach the dot's operand layout
(benchmarks/RESULTS.md, issue 16: 8-9 % faster in the fp8_vt experiment). Until the shipped
kernel has been timed and tested on a GPU in this layout, "auto" allocates every V token-major
(`V_TRANSPOSED_BY_DEFAULT` is empty); ask for "transposed" explicitly.

A transposed V cannot be read as smaller kernel blocks (`launch.kernel_block_view`): a kernel
block's tokens are not one stride apart from the next block's.
"""

from __future__ import annotations

import torch

V_LAYOUTS = ("auto", "token_major", "transposed")
# cache dtypes whose V "auto" transposes: fp8 once the layout has run on a GPU
V_TRANSPOSED_BY_DEFAULT: frozenset[torch.dtype] = frozenset()


def is_transposed_v(v_cache: torch.Tensor) -> bool:
    """Whether a 4-D V cache is stored `[blocks, kv_heads, head_size, block_size]` (dense
    within each block), seen as `[blocks, block_size, kv_heads, head_size]`."""
    if v_cache.dim() != 4:
        return False
    _, block, heads, head = v_cache.shape
    s = v_cache.stride()
    return block > 1 and s[1] == 1 and s[3] == block and (heads == 1 or s[2] == block * head)


def transposed_view(storage: torch.Tensor) -> torch.Tensor:
    """A contiguous `[blocks, block_size, kv_heads, head_size]` buffer's memory reread as a
    transposed V cache of the same shape (the values it held are not carried over)."""
    n, block, heads, head = storage.shape
    if not storage.is_contiguous():
        raise ValueError("transposed_view: the buffer must be contiguous")
    return storage.view(n, heads, head, block).permute(0, 3, 1, 2)


def v_transposed_for(dtype: torch.dtype, layout: str = "auto") -> bool:
    """Whether a V cache of `dtype` is allocated transposed under `layout` (V_LAYOUTS)."""
    if layout not in V_LAYOUTS:
        raise ValueError(f"v_layout {layout!r}: expected one of {', '.join(V_LAYOUTS)}")
    return layout == "transposed" or (layout == "auto" and dtype in V_TRANSPOSED_BY_DEFAULT)


def as_v_layout(storage: torch.Tensor, layout: str = "auto") -> torch.Tensor:
    """`storage` (contiguous, token-major) as the V cache `layout` asks for its dtype."""
    return transposed_view(storage) if v_transposed_for(storage.dtype, layout) else storage


def new_kv_cache(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int,
                 dtype: torch.dtype, device: torch.device | str = "cpu", *,
                 v_layout: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """An uninitialised (K, V) pair, V laid out as `v_layout` says."""
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    k = torch.empty(shape, dtype=dtype, device=device)
    return k, as_v_layout(torch.empty(shape, dtype=dtype, device=device), v_layout)


def cache_rows(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Rows `[len(slots), num_kv_heads, head_size]` of a cache at `slots` (block * block_size +
    offset) in either layout, without copying the whole cache as a reshape of a transposed V
    would."""
    block = cache.shape[1]
    if cache.element_size() == 1:  # fp8: index its bytes, as kernels/swap.py does
        return cache.view(torch.uint8)[slots // block, slots % block].view(cache.dtype)
    return cache[slots // block, slots % block]


def set_cache_rows(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """Write `rows` `[len(slots), num_kv_heads, head_size]` (the cache's dtype) at `slots`."""
    block = cache.shape[1]
    if cache.element_size() == 1:
        cache.view(torch.uint8)[slots // block, slots % block] = rows.view(torch.uint8)
    else:
        cache[slots // block, slots % block] = rows


def with_v_layout(v_cache: torch.Tensor, layout: str) -> torch.Tensor:
    """A copy of `v_cache`'s values in `layout` ("token_major" or "transposed")."""
    if layout not in V_LAYOUTS[1:]:
        raise ValueError(f"layout {layout!r}: expected token_major or transposed")
    out = torch.empty(v_cache.shape, dtype=v_cache.dtype, device=v_cache.device)
    if layout == "transposed":
        out = transposed_view(out)
    if v_cache.element_size() == 1:  # fp8: copy the bytes (some torch builds lack fp8 copies)
        out.view(torch.uint8).copy_(v_cache.view(torch.uint8))
    else:
        out.copy_(v_cache)
    return out
