"""Paged prefill/extend attention: a chunk of new tokens per sequence over its paged context.

Chunked prefill and prefix-cache hits both leave a sequence with `prefix` tokens already in the
paged cache and `n` new ones, whose K/V reshape_and_cache has just written behind them. The
causal mask is aligned to the end of the context:

    keys:    0 ............ prefix-1 | prefix ......... ctx-1
    query i (0 <= i < n) sits at position prefix + i and sees keys 0 .. prefix + i

Long chunks run as query tiles of BLOCK_M new tokens of one query head, heaviest tiles first,
masking only the tiles on the diagonal. Short ones (at most 16 new tokens: a prefix hit
followed by a few tokens, speculative verification) run as split-K items like decodes, so a
short extend over a long prefix reads the prefix once, at the decode kernel's bandwidth.
Both are kernels/attention.py's `paged_attention`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernels.attention import paged_attention
from kernels.decode_config import DecodeConfig
from kernels.prefill_config import PrefillConfig, default_prefill_config

__all__ = ["PrefillConfig", "default_prefill_config", "paged_prefill_attention"]


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor | Sequence[Sequence[int]],
    query_start_loc: torch.Tensor | Sequence[int],
    context_lens: torch.Tensor | Sequence[int],
    *,
    scale: float | None = None,
    max_new_tokens: int | None = None,
    max_context_len: int | None = None,
    config: PrefillConfig | None = None,
    out: torch.Tensor | None = None,
    sliding_window: int | None = None,
    attention_chunk_size: int | None = None,
    soft_cap: float | None = None,
    sinks: torch.Tensor | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    kernel_block_size: int | None = None,
    decode_config: DecodeConfig | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's new tokens over its whole paged context.

    Args:
        q: `[num_tokens, num_q_heads, head_size]`, the new tokens of all sequences packed.
        k_cache, v_cache: `[num_blocks, block_size, num_kv_heads, head_size]`, already holding
            the new tokens' K/V (q's dtype, or fp8 e4m3 with scales `k_scale`, `v_scale`).
        block_tables: per-sequence physical block ids (list of lists or int32 tensor).
        query_start_loc: `[num_seqs + 1]` offsets of each sequence's tokens in `q`.
        context_lens: `[num_seqs]` context length including the new tokens.
        scale: softmax scale, default `head_size ** -0.5`.
        max_new_tokens, max_context_len: most new tokens and longest context of any sequence
            (pass them to avoid device syncs, e.g. under CUDA graph capture).
        config: query-tile shape and launch options; default `default_prefill_config`.
        out: optional output buffer shaped like `q`.
        sliding_window, attention_chunk_size, soft_cap, sinks, kernel_block_size,
            decode_config: as in `kernels.attention.paged_attention`.

    Returns:
        `[num_tokens, num_q_heads, head_size]` in q's dtype.

    Raises:
        ValueError: on shape, dtype, device or stride mismatches.
    """
    return paged_attention(
        q, k_cache, v_cache, block_tables, query_start_loc, context_lens, scale=scale,
        max_query_len=max_new_tokens, max_context_len=max_context_len,
        sliding_window=sliding_window,
        attention_chunk_size=attention_chunk_size, soft_cap=soft_cap, sinks=sinks,
        k_scale=k_scale, v_scale=v_scale, kernel_block_size=kernel_block_size,
        decode_config=decode_config, prefill_config=config, out=out)
