"""Paged decode attention: one new query token per sequence against its paged KV cache.

The one entry point for decode batches, uniform or ragged: the work is split by tokens, not
by sequences (kernels/split_k.py builds the list of (sequence, KV head, token range) items on
the device, no host sync), so a ragged batch runs as many equal items as a uniform one. Each
program loads the query heads that share its KV head (GQA/MQA, padded to 16 rows for
tensor-core dots) and streams its range in tiles of `BLOCK_N` tokens, which may span pages:

    token t  ->  block_tables[seq][t // block_size], row t % block_size

bf16 probabilities go through the P.V dot as two bf16 terms (`launch.split_p`). A sequence
cut into several items is merged by the last of its programs to finish (an atomic counter,
left at zero again), or by a second launch (`DecodeConfig(fused_reduce=False)`). The launch
plan is cached per shape (kernels/attention_plan.py) and validated calls' bound launches are
found again without re-running the checks (kernels/decode_cache.py), so the wrapper's own
Python stays small.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernels import decode_cache
from kernels.attention import bound_launch, check_inputs, check_variants, max_span, run_plan
from kernels.attention_plan import Plan, Shape, cached_plan
from kernels.decode_cache import SAME, fast_key, find, promote, remember, same_launch
from kernels.decode_config import DecodeConfig
from kernels.launch import as_block_tables, as_int_tensor, kernel_block_view, num_sms


def clear_launch_cache() -> None:
    """Forget the bound launches of this wrapper and of `attention.paged_attention` (for
    timing the wrappers with the launch patched out)."""
    decode_cache.clear()


def _plan(q: torch.Tensor, k_cache: torch.Tensor, block_size: int, num_kv_heads: int,
          head_size: int, max_context_len: int, window: int | None, chunk: int | None,
          soft_cap: float | None, has_sink: bool, scale: float | None, k_scale: float,
          v_scale: float, num_splits: int | None, config: DecodeConfig | None,
          v_transposed: bool) -> Plan:
    sh = Shape(q.shape[0], 1, 0, 1, max_span(max_context_len, 1, window, chunk), q.shape[1],
               num_kv_heads, head_size, block_size, q.dtype, k_cache.dtype, window, chunk,
               soft_cap, has_sink, head_size**-0.5 if scale is None else scale, k_scale,
               v_scale, num_splits or 0, config, None, num_sms(q.device),
               q.device.type == "cpu", False, v_transposed)
    return cached_plan(sh)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor | Sequence[Sequence[int]],
    context_lens: torch.Tensor | Sequence[int],
    *,
    scale: float | None = None,
    sliding_window: int | None = None,
    max_context_len: int | None = None,
    num_splits: int | None = None,
    config: DecodeConfig | None = None,
    out: torch.Tensor | None = None,
    attention_chunk_size: int | None = None,
    soft_cap: float | None = None,
    sinks: torch.Tensor | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    kernel_block_size: int | None = None,
) -> torch.Tensor:
    """Attention of one query token per sequence over its paged context.

    Split-K launches on one device must be stream-ordered (as a forward pass is): they share a
    per-device scratch buffer (see `attention.scratch`).

    Args:
        q: `[num_seqs, num_q_heads, head_size]`; num_q_heads a multiple of num_kv_heads; each
            token's heads contiguous (a slice of a fused QKV output is fine).
        k_cache, v_cache: `[num_blocks, block_size, num_kv_heads, head_size]`, q's dtype or
            fp8 e4m3 with per-tensor scales `k_scale`, `v_scale` (kernels/fp8.py).
        block_tables: per-sequence physical block ids (list of lists or int32 tensor); with
            `kernel_block_size`, kernel block ids of that size under the cache's blocks.
        context_lens: tokens per sequence (>= 1), the query's own token included.
        scale: softmax scale, default `head_size ** -0.5`.
        sliding_window: if set, attend only to the last `sliding_window` tokens.
        max_context_len: largest context length; pass it to avoid a device sync.
        num_splits: items per sequence, fixed; default the split rule (kernels/split_k.py).
        config: tile shape, launch options and split knobs; default `default_decode_config`.
        out: optional `[num_seqs, num_q_heads, head_size]` output buffer.
        attention_chunk_size, soft_cap, sinks: Llama 4 local attention, Gemma 2 logit
            soft-capping, gpt-oss attention sinks (`[num_q_heads]` float32 logits).

    Returns:
        The attention output, shaped and typed like `q`.

    Raises:
        ValueError: on shape, dtype, device or stride mismatches.
    """
    if kernel_block_size is not None:
        k_cache = kernel_block_view(k_cache, kernel_block_size)
        v_cache = kernel_block_view(v_cache, kernel_block_size)
    key = None
    tensor_args = (type(block_tables) is torch.Tensor and type(context_lens) is torch.Tensor
                   and max_context_len is not None)
    if tensor_args:
        opts = ((max_context_len - 1).bit_length(), sliding_window, attention_chunk_size,
                soft_cap, scale, k_scale, v_scale, num_splits, config)
        if id(q) in SAME:
            launch = same_launch(q, k_cache, v_cache, block_tables, context_lens, out, sinks,
                                 opts)
            if launch is not None:
                return launch(torch.empty_like(q) if out is None else out, q, k_cache,
                              v_cache, block_tables, context_lens, context_lens, sinks)
    given_out = out
    out = torch.empty_like(q) if out is None else out
    if tensor_args:
        key = fast_key(q, k_cache, v_cache, block_tables, context_lens, out, sinks, opts)
        found = find(key)
        if found is not None:
            state = found[1]  # [id(q) of the last hit, hits left before promotion may be]
            if state[1]:
                state[0], state[1] = id(q), state[1] - 1
            elif state[0] != id(q):
                state[0] = id(q)
            else:
                promote((q, k_cache, v_cache, block_tables, context_lens, given_out, sinks),
                        opts, found)
            return found[0](out, q, k_cache, v_cache, block_tables, context_lens,
                            context_lens, sinks)
    geom = check_inputs(q, k_cache, v_cache, out)
    num_seqs = q.shape[0]
    device = q.device
    tables = as_block_tables(block_tables, device)
    lens = as_int_tensor(context_lens, device, "context_lens")
    if tables.shape[0] != num_seqs or lens.shape[0] != num_seqs:
        raise ValueError(f"{num_seqs} queries, {tables.shape[0]} tables, {lens.shape[0]} lengths")
    if num_seqs == 0:
        return out
    if max_context_len is None:
        max_context_len = int(lens.max().item())
    check_variants(q.shape[1], sinks, soft_cap, sliding_window, attention_chunk_size, device)
    plan = _plan(q, k_cache, *geom[:3], max_context_len, sliding_window, attention_chunk_size,
                 soft_cap, sinks is not None, scale, k_scale, v_scale, num_splits, config,
                 geom[8])
    run_plan(plan, geom, out, q, k_cache, v_cache, tables, lens, lens,
             lens if sinks is None else sinks)
    if key is not None and tables is block_tables and lens is context_lens:
        remember(key, bound_launch(plan, geom, out, tables), q)
    return out
