"""paged_attention: decodes, short extends and prefill chunks of one batch in one launch.

Host side of kernels/attention_kernel.py. Sequences `[0, num_small_seqs)` (at most
`small_query_len` new tokens each: decodes, speculative verification, short extends) become
split-K work items; the rest (prefill chunks) become query tiles. As in vLLM, put the short
sequences first. `paged_decode_attention` and `paged_prefill_attention` are the one-kind
forms of this call. The launch plan is cached per shape (kernels/attention_plan.py); called
with tensors and both maxima, validated calls' bound launches are found again without
re-running the checks (kernels/decode_cache.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from kernels.attention_kernel import merge_kernel, paged_attention_kernel
from kernels.attention_plan import Plan, Shape, bucket, cached_plan
from kernels.cache_layout import is_transposed_v
from kernels.decode_cache import fast_key, find, remember
from kernels.decode_config import DecodeConfig
from kernels.launch import (
    CACHE_DTYPES,
    SUPPORTED_DTYPES,
    as_block_tables,
    as_int_tensor,
    check_head_size,
    check_kv_cache,
    for_device,
    kernel_block_view,
    num_sms,
)
from kernels.prefill_config import PrefillConfig

_HEAD_SIZES = (16, 32, 64, 128, 256)
_FP8 = torch.float8_e4m3fn
SMALL_QUERY_LIMIT = 16  # most new tokens per sequence that split-K items take by default
SMALL_ROWS_LIMIT = 128  # and at most this many (token, query head) rows per item

# Split-K scratch per device: partial outputs/log-sum-exps and the arrival counters. Grown on
# demand and never freed, since a captured CUDA graph may still point at an older buffer. The
# counters are zero between calls (each merging program resets its own), which is why split-K
# calls on one device must be stream-ordered.
_SCRATCH: dict[torch.device, list[tuple[torch.Tensor, torch.Tensor]]] = {}
_VIEWS: dict[tuple[torch.device, int, int, int], tuple[torch.Tensor, ...]] = {}


def scratch(device: torch.device, rows: int, head_size: int, counters: int
            ) -> tuple[torch.Tensor, ...]:
    """(partial outputs, log2-sum-exps, counters) of at least `rows` rows and `counters`."""
    key = (device, rows, head_size, counters)
    views = _VIEWS.get(key)
    if views is not None:
        return views
    held = _SCRATCH.setdefault(device, [])
    floats = max(1, rows * (head_size + 1))
    if not held or held[-1][0].numel() < floats or held[-1][1].numel() < counters:
        old_f, old_c = (held[-1][0].numel(), held[-1][1].numel()) if held else (0, 0)
        held.append((torch.empty(max(floats, 2 * old_f), dtype=torch.float32, device=device),
                     torch.zeros(max(counters, 2 * old_c, 1), dtype=torch.int32, device=device)))
        _VIEWS.clear()
    part, count = held[-1]
    views = _VIEWS[key] = (part, part[rows * head_size:], count)
    return views


def check_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 out: torch.Tensor) -> tuple[int, ...]:
    """Validate q/out/caches; return (block_size, num_kv_heads, head_size, the caches' block
    and token strides, q's and out's token strides, V's block stride, whether V is stored
    transposed per block).

    One cheap test covers the common case; the detailed checks run only to name a failure.
    """
    ks, qs, os_ = k_cache.stride(), q.stride(), out.stride()
    shape, qsh = k_cache.shape, q.shape
    head_size, dt, kdt = shape[-1], q.dtype, k_cache.dtype
    if (
        len(shape) == 4 and len(qsh) == 3 and ks[2:] == (head_size, 1)
        and qs[1:] == (head_size, 1) and os_[1:] == (head_size, 1)
        and (not (v_t := v_cache.stride() != ks) or is_transposed_v(v_cache))
        and v_cache.shape == shape and out.shape == qsh and qsh[2] == head_size
        and qsh[1] % shape[2] == 0 and head_size in _HEAD_SIZES and v_cache.dtype is kdt
        and out.dtype is dt and (kdt is dt or kdt is _FP8) and dt in SUPPORTED_DTYPES
        and (dev := q.device) == k_cache.device and v_cache.device == dev
        and out.device == dev
    ):  # fmt: skip
        return shape[1], shape[2], head_size, ks[0], ks[1], qs[0], os_[0], v_cache.stride(0), v_t
    _, _, num_kv_heads, head_size = check_kv_cache(k_cache, v_cache)
    check_head_size(head_size)
    if q.dim() != 3 or q.shape[2] != head_size or q.shape[1] % num_kv_heads:
        raise ValueError(
            f"q: expected [tokens, k*{num_kv_heads}, {head_size}], got {tuple(q.shape)}")
    if q.dtype not in SUPPORTED_DTYPES or k_cache.dtype not in (q.dtype, CACHE_DTYPES[-1]):
        raise ValueError(f"q: dtype {q.dtype} with a {k_cache.dtype} cache is unsupported")
    if q.device != k_cache.device:
        raise ValueError(f"q: device {q.device} differs from the cache's")
    if q.stride()[1:] != (head_size, 1):
        raise ValueError("q: each token's [num_q_heads, head_size] must be contiguous")
    if k_cache.stride()[2] != head_size or (k_cache.stride() != v_cache.stride()
                                            and not is_transposed_v(v_cache)):
        raise ValueError("caches: K needs contiguous [heads, head_size] rows and V the same "
                         "strides, or V stored transposed per block (kernels/cache_layout.py)")
    raise ValueError(f"out: expected {tuple(q.shape)} {q.dtype} on {q.device} with contiguous "
                     "heads")


def run_plan(plan: Plan, geom: tuple[int, ...], out: torch.Tensor, q: torch.Tensor,
             k_cache: torch.Tensor, v_cache: torch.Tensor, tables: torch.Tensor,
             lens: torch.Tensor, starts: torch.Tensor, sinks: torch.Tensor) -> None:
    """Launch the kernel (and the separate merge, if the plan has one) for these tensors;
    `geom` is what `check_inputs` returned. Constants go positionally, in signature order."""
    part, lse, counters = scratch(q.device, plan.scratch_rows, plan.head_size, plan.counters)
    d = geom[2]
    for_device(paged_attention_kernel, q.device)[(plan.grid,)](
        out, part, lse, counters, q, k_cache, v_cache, tables, lens, starts, sinks,
        *plan.scalars, geom[5], d, geom[6], d, geom[3], geom[4], geom[7], tables.stride(0),
        *plan.const_args, **plan.launch)
    if plan.merge_grid:
        s = plan.scalars
        for_device(merge_kernel, q.device)[(plan.merge_grid,)](
            out, part, lse, sinks, lens, starts, plan.num_small, s[1], s[2], s[3], s[4], s[8],
            s[9], geom[6], d, **plan.merge_constexprs)


def bound_launch(plan: Plan, geom: tuple[int, ...], out: torch.Tensor, tables: torch.Tensor
                 ) -> Callable[..., torch.Tensor]:
    """`run_plan` bound to what stays the same while shapes, strides, dtypes and devices do
    (the fast paths of kernels/decode_cache.py): a `launch(out, q, k_cache, v_cache, tables,
    lens, starts, sinks or None)` that returns `out`. The arguments are those of `run_plan`,
    in the same order; decode passes its lengths for `starts`, as it does to `run_plan`."""
    dev = out.device
    part, lse, counters = scratch(dev, plan.scratch_rows, plan.head_size, plan.counters)
    d = geom[2]
    kernel = for_device(paged_attention_kernel, dev)[(plan.grid,)]
    tail = (*plan.scalars, geom[5], d, geom[6], d, geom[3], geom[4], geom[7], tables.stride(0),
            *plan.const_args)
    options, s, merge_options = plan.launch, plan.scalars, plan.merge_constexprs
    merge_tail = (plan.num_small, s[1], s[2], s[3], s[4], s[8], s[9], geom[6], d)
    merge = for_device(merge_kernel, dev)[(plan.merge_grid,)] if plan.merge_grid else None

    def launch(o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               t: torch.Tensor, n: torch.Tensor, st: torch.Tensor, sinks: torch.Tensor | None
               ) -> torch.Tensor:
        sk = n if sinks is None else sinks
        kernel(o, part, lse, counters, q, k, v, t, n, st, sk, *tail, **options)
        if merge is not None:
            merge(o, part, lse, sk, n, st, *merge_tail, **merge_options)
        return o
    return launch


def max_span(max_context_len: int, query_len: int, window: int | None, chunk: int | None) -> int:
    """Bound on the keys a short sequence attends to, rounded up for plan keys."""
    span = max_context_len
    for size in (window, chunk):
        if size:
            span = min(span, size + query_len - 1)
    return bucket(span)


def check_variants(num_q_heads: int, sinks: torch.Tensor | None, soft_cap: float | None,
                   window: int | None, chunk: int | None, device: torch.device) -> None:
    """Arguments of the model variants: sinks `[num_q_heads]` fp32, positive sizes and cap."""
    if sinks is not None and (sinks.shape != (num_q_heads,) or sinks.dtype != torch.float32
                              or sinks.device != device or sinks.stride(0) != 1):
        raise ValueError(f"sinks: expected a contiguous [{num_q_heads}] float32 tensor on "
                         f"{device}, got {sinks.dtype} {tuple(sinks.shape)}")
    if soft_cap is not None and not soft_cap > 0:
        raise ValueError(f"soft_cap {soft_cap} must be > 0")
    for name, v in (("sliding_window", window), ("attention_chunk_size", chunk)):
        if v is not None and v < 1:
            raise ValueError(f"{name} {v} must be >= 1")


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor | Sequence[Sequence[int]],
    query_start_loc: torch.Tensor | Sequence[int],
    context_lens: torch.Tensor | Sequence[int],
    *,
    num_small_seqs: int | None = None,
    small_query_len: int = 1,
    max_query_len: int | None = None,
    max_context_len: int | None = None,
    scale: float | None = None,
    sliding_window: int | None = None,
    attention_chunk_size: int | None = None,
    soft_cap: float | None = None,
    sinks: torch.Tensor | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    kernel_block_size: int | None = None,
    num_splits: int | None = None,
    decode_config: DecodeConfig | None = None,
    prefill_config: PrefillConfig | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's new tokens over its whole paged context.

    Args:
        q: `[num_tokens, num_q_heads, head_size]`, the new tokens of all sequences packed.
        k_cache, v_cache: `[num_blocks, block_size, num_kv_heads, head_size]` in q's dtype or
            fp8 e4m3 (`k_scale`/`v_scale`: its per-tensor scales), already holding the new
            tokens' K/V; `kernel_block_size` reads them as blocks of that many tokens (then
            `block_tables` hold kernel block ids, `BlockTable.map_to_kernel_blocks`).
        block_tables, query_start_loc `[num_seqs + 1]`, context_lens `[num_seqs]` (new tokens
            included): as in vLLM; new token i of n sits at position `context_len - n + i`.
        num_small_seqs: leading sequences with at most `small_query_len` new tokens each, run
            as split-K items; default: all if `max_query_len` <= 16 (and the heads allow),
            else none. `max_query_len`, `max_context_len`: pass them to avoid device syncs
            (and, with tensor tables, offsets and lengths, to reuse validated launches).
        sliding_window, attention_chunk_size (Llama 4 local attention), soft_cap (Gemma 2),
            sinks (gpt-oss, `[num_q_heads]` float32 logits): model variants.
        num_splits, decode_config, prefill_config, out: as in the one-kind wrappers.

    Raises:
        ValueError: on shape, dtype, device or stride mismatches.
    """
    if kernel_block_size is not None:
        k_cache = kernel_block_view(k_cache, kernel_block_size)
        v_cache = kernel_block_view(v_cache, kernel_block_size)
    out = torch.empty_like(q) if out is None else out
    key = None
    if (type(block_tables) is torch.Tensor and type(query_start_loc) is torch.Tensor
            and type(context_lens) is torch.Tensor and max_query_len is not None
            and max_context_len is not None):
        opts = (num_small_seqs, small_query_len, max_query_len,
                (max_context_len - 1).bit_length(), sliding_window, attention_chunk_size,
                soft_cap, scale, k_scale, v_scale, num_splits, decode_config, prefill_config)
        key = fast_key(q, k_cache, v_cache, block_tables, context_lens, out, sinks, opts,
                       query_start_loc)
        found = find(key)
        if found is not None:
            return found[0](out, q, k_cache, v_cache, block_tables, context_lens,
                            query_start_loc, sinks)
    geom = check_inputs(q, k_cache, v_cache, out)
    block_size, num_kv_heads, head_size = geom[:3]
    dev = q.device
    check_variants(q.shape[1], sinks, soft_cap, sliding_window, attention_chunk_size, dev)
    tables = as_block_tables(block_tables, dev)
    starts = as_int_tensor(query_start_loc, dev, "query_start_loc")
    lens = as_int_tensor(context_lens, dev, "context_lens")
    num_seqs = lens.numel()
    if starts.numel() != num_seqs + 1 or tables.shape[0] != num_seqs:
        raise ValueError(f"{num_seqs} context lengths, {starts.numel()} start offsets, "
                         f"{tables.shape[0]} tables")
    if num_seqs == 0 or q.shape[0] == 0:
        return out
    if max_query_len is None:
        max_query_len = int((starts[1:] - starts[:-1]).max().item())
    group = q.shape[1] // num_kv_heads
    limit = max(1, min(SMALL_QUERY_LIMIT, SMALL_ROWS_LIMIT // group))
    if num_small_seqs is None:
        num_small_seqs, small_query_len = (num_seqs, max_query_len) if max_query_len <= limit \
            else (0, 1)
    if num_small_seqs and not 1 <= small_query_len <= limit:
        raise ValueError(f"small_query_len {small_query_len}: split-K items take 1..{limit}")
    if max_context_len is None:
        max_context_len = int(lens.max().item())
    sh = Shape(num_small_seqs, small_query_len, num_seqs - num_small_seqs, max_query_len,
               max_span(max_context_len, small_query_len, sliding_window, attention_chunk_size),
               q.shape[1], num_kv_heads, head_size, block_size,
               q.dtype, k_cache.dtype, sliding_window, attention_chunk_size, soft_cap,
               sinks is not None, head_size**-0.5 if scale is None else scale, k_scale,
               v_scale, num_splits or 0, decode_config, prefill_config, num_sms(dev),
               dev.type == "cpu", True, geom[8])
    plan = cached_plan(sh)
    run_plan(plan, geom, out, q, k_cache, v_cache, tables, lens, starts,
             lens if sinks is None else sinks)
    if (key is not None and tables is block_tables and starts is query_start_loc
            and lens is context_lens):
        remember(key, bound_launch(plan, geom, out, tables), q)
    return out
