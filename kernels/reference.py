"""Plain torch references for the paged kernels, and the error metric the tests use.

Two independent references: (1) walk each sequence's block table token by token (token t lives
in block `table[t // block_size]`, row `t % block_size`), gather K/V and run attention in
float64; (2) torch's scaled_dot_product_attention on the same KV laid out contiguously
`[1, num_kv_heads, context, head_size]` with `enable_gqa=True`. Neither shares code with the
Triton kernels beyond the cache layout. The float64 reference also applies the model variants
(`Variant`) and reads fp8 caches as their dequantised values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

Tables = torch.Tensor | Sequence[Sequence[int]]
Ints = torch.Tensor | Sequence[int]


def gather_tokens(
    cache: torch.Tensor, block_table: Sequence[int], positions: range
) -> torch.Tensor:
    """Rows of `cache` for token `positions` of one sequence: `[len(positions), kv_heads, d]`."""
    block_size = cache.shape[1]
    table = torch.as_tensor(list(block_table), dtype=torch.int64, device=cache.device)
    pos = torch.arange(positions.start, positions.stop, dtype=torch.int64, device=cache.device)
    return cache[table[pos // block_size], pos % block_size]


@dataclass(frozen=True, slots=True)
class Variant:
    """Model variants and cache scales the references apply (None: off).

    soft_cap: Gemma 2 logit soft-capping, `cap * tanh(score / cap)`; sinks: gpt-oss attention
    sinks, one logit per query head joining each softmax denominator; window: sliding window;
    chunk: Llama 4 chunked local attention (a query at p sees keys from p // chunk * chunk);
    k_scale / v_scale: what an fp8 cache's values are multiplied by (kernels/fp8.py).
    """

    soft_cap: float | None = None
    sinks: torch.Tensor | None = None
    window: int | None = None
    chunk: int | None = None
    k_scale: float = 1.0
    v_scale: float = 1.0

    def visible(self, q_pos: torch.Tensor, ctx: int) -> torch.Tensor:
        """`[n, ctx]`: key j visible to the query at q_pos[i] (causal, window, chunk)."""
        keys = torch.arange(ctx, device=q_pos.device)[None, :]
        lo = torch.zeros_like(q_pos)
        if self.window:
            lo = (q_pos - self.window + 1).clamp(min=0)
        if self.chunk:
            lo = torch.maximum(lo, q_pos // self.chunk * self.chunk)
        return (keys <= q_pos[:, None]) & (keys >= lo[:, None])


def _attend64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
              visible: torch.Tensor, var: Variant) -> torch.Tensor:
    """float64 attention: q `[n, Hq, D]`, k/v `[ctx, Hkv, D]`, visible `[n, ctx]` bool."""
    group = q.shape[1] // k.shape[1]
    k64 = k.double().repeat_interleave(group, dim=1) * var.k_scale
    v64 = v.double().repeat_interleave(group, dim=1) * var.v_scale
    scores = torch.einsum("nhd,thd->hnt", q.double(), k64) * scale
    if var.soft_cap is not None:
        scores = var.soft_cap * torch.tanh(scores / var.soft_cap)
    scores = scores.masked_fill(~visible[None], float("-inf"))
    if var.sinks is None:
        probs = torch.softmax(scores, dim=-1)
    else:
        sink = var.sinks.double().to(q.device)[:, None, None].expand(-1, scores.shape[1], 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("hnt,thd->nhd", probs, v64)


def ref_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: Tables,
    context_lens: Ints,
    *,
    scale: float | None = None,
    sliding_window: int | None = None,
    variant: Variant | None = None,
) -> torch.Tensor:
    """float64 decode attention over a token-by-token gather; `[num_seqs, num_q_heads, d]`."""
    base = variant or Variant()
    var = replace(base, window=sliding_window or base.window)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    outs = []
    for i, ctx in enumerate(int(c) for c in context_lens):
        table = [int(b) for b in block_tables[i]]
        k = gather_tokens(k_cache, table, range(ctx))
        v = gather_tokens(v_cache, table, range(ctx))
        visible = var.visible(torch.tensor([ctx - 1], device=q.device), ctx)
        outs.append(_attend64(q[i : i + 1], k, v, scale, visible, var)[0])
    return torch.stack(outs)


def ref_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: Tables,
    query_start_loc: Ints,
    context_lens: Ints,
    *,
    scale: float | None = None,
    variant: Variant | None = None,
) -> torch.Tensor:
    """float64 causal extend attention aligned to the end; `[num_tokens, num_q_heads, d]`.

    New token i of n sits at position `ctx - n + i` and sees every key at or before it (within
    the variant's window or chunk).
    """
    var = variant or Variant()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for i, ctx in enumerate(int(c) for c in context_lens):
        start, end = int(query_start_loc[i]), int(query_start_loc[i + 1])
        if end == start:
            continue
        table = [int(b) for b in block_tables[i]]
        k = gather_tokens(k_cache, table, range(ctx))
        v = gather_tokens(v_cache, table, range(ctx))
        visible = var.visible(torch.arange(ctx - (end - start), ctx, device=q.device), ctx)
        out[start:end] = _attend64(q[start:end], k, v, scale, visible, var)
    return out


def contiguous_kv(
    cache: torch.Tensor, block_table: Sequence[int], context_len: int
) -> torch.Tensor:
    """One sequence's cache rows as a contiguous `[1, num_kv_heads, context_len, d]` tensor."""
    return (
        gather_tokens(cache, block_table, range(context_len))
        .permute(1, 0, 2)
        .unsqueeze(0)
        .contiguous()
    )


def sdpa_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: Tables,
    context_lens: Ints,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """torch SDPA per sequence on contiguous KV, `enable_gqa=True`; `[num_seqs, Hq, D]`."""
    outs = []
    for i, ctx in enumerate(int(c) for c in context_lens):
        k = contiguous_kv(k_cache, block_tables[i], ctx)
        v = contiguous_kv(v_cache, block_tables[i], ctx)
        qi = q[i][None, :, None, :]  # [1, Hq, 1, D]
        outs.append(F.scaled_dot_product_attention(qi, k, v, scale=scale, enable_gqa=True)[0, :, 0])
    return torch.stack(outs)


def sdpa_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: Tables,
    query_start_loc: Ints,
    context_lens: Ints,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """torch SDPA per sequence with an explicit end-aligned causal mask; `[num_tokens, Hq, D]`."""
    out = torch.empty_like(q)
    for i, ctx in enumerate(int(c) for c in context_lens):
        start, end = int(query_start_loc[i]), int(query_start_loc[i + 1])
        k = contiguous_kv(k_cache, block_tables[i], ctx)
        v = contiguous_kv(v_cache, block_tables[i], ctx)
        q_pos = torch.arange(ctx - (end - start), ctx, device=q.device)
        mask = torch.arange(ctx, device=q.device)[None, :] <= q_pos[:, None]
        qi = q[start:end].transpose(0, 1)[None]  # [1, Hq, n, D]
        res = F.scaled_dot_product_attention(qi, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
        out[start:end] = res[0].transpose(0, 1)
    return out


def rel_error_per_seq_head(
    out: torch.Tensor, ref: torch.Tensor, token_seq: torch.Tensor | None = None
) -> torch.Tensor:
    """max|out - ref| / max|ref| per (sequence, head), in float64.

    Args:
        out, ref: `[num_tokens, num_heads, head_size]` (decode: one token per sequence).
        token_seq: sequence index of each token; default one token per sequence.

    Returns:
        `[num_seqs, num_heads]` errors; NaN anywhere in `out` gives NaN (never passes `<`).
    """
    diff = (out.double() - ref.double()).abs().nan_to_num(nan=float("inf")).amax(dim=2)
    mag = ref.double().abs().amax(dim=2)
    if token_seq is None:
        return diff / mag
    num_seqs = int(token_seq.max()) + 1
    idx = token_seq.to(out.device).long()[:, None].expand_as(diff)
    init = torch.zeros((num_seqs, diff.shape[1]), dtype=torch.float64, device=out.device)
    diff_max = init.scatter_reduce(0, idx, diff, "amax")
    mag_max = init.clone().scatter_reduce(0, idx, mag, "amax")
    return diff_max / mag_max
