"""A step's device inputs and activation buffers, made before anything is timed or captured.

Everything a forward reads is uploaded once per step (token ids, positions, the logged slots and
block tables, context lengths, MoE routing), and every activation has a preallocated buffer
filled with random values, so the forward launches kernels only: it can be captured in a CUDA
graph, and a part of it can run alone on the other parts' stale buffers (kernels/execute/
timing.py). MoE routing assumption: each token (padding included) picks `num_experts_per_tok`
distinct experts uniformly at random, per layer, from a generator seeded by (seed, step); the
router GEMM and softmax still run, their choice is not used. Rows are sorted by expert once
here (the sort vLLM's `moe_align_block_size` does on the GPU is not timed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.execute.batch import StepBatch
from kernels.execute.model import Engine


@dataclass(slots=True)
class Routing:
    """Per layer: expert-sorted rows' source tokens and experts, and rows per expert."""

    token_of: torch.Tensor  # [layers, rows] int64 (rows = padded tokens x experts per token)
    prob_index: torch.Tensor  # [layers, rows] int64: token * num_experts + expert
    offs: torch.Tensor  # [layers, num_experts] int32, cumulative row counts
    counts: list[list[int]]  # [layers][num_experts] rows per expert (host copy)


@dataclass(slots=True)
class StepTensors:
    """Device inputs of one packed step."""

    batch: StepBatch
    token_ids: torch.Tensor  # [padded] int64
    positions: torch.Tensor  # [padded] int64
    slots: torch.Tensor  # [padded] int64, -1 for padding
    dec_tables: torch.Tensor  # [decode rows, max blocks] int32
    dec_lens: torch.Tensor  # [decode rows] int32
    dec_max: int
    pre_tables: torch.Tensor  # [prefills, max blocks] int32
    pre_starts: torch.Tensor  # [prefills + 1] int32
    pre_lens: torch.Tensor  # [prefills] int32
    pre_max_new: int
    pre_max_ctx: int
    logits_rows: torch.Tensor | None  # [seqs] int64; None: every row (full graphs)
    routing: Routing | None


def _tables(rows: list[list[int]], device: torch.device) -> torch.Tensor:
    width = max([len(r) for r in rows] + [1])
    out = torch.zeros((len(rows), width), dtype=torch.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.int32)
    return out.to(device)


def route(engine: Engine, num_rows: int, seed: int, step: int) -> Routing:
    """Seeded uniform top-k routing of `num_rows` tokens in every layer (module docstring)."""
    a, dev = engine.arch, engine.device
    gen = torch.Generator(device=dev).manual_seed(seed * 1_000_003 + step)
    scores = torch.rand((a.num_layers, num_rows, a.num_experts), generator=gen, device=dev)
    ids = scores.topk(a.num_experts_per_tok, dim=-1).indices.reshape(a.num_layers, -1)
    experts, order = torch.sort(ids, dim=-1, stable=True)
    token_of = order // a.num_experts_per_tok
    counts = torch.zeros((a.num_layers, a.num_experts), dtype=torch.int64, device=dev)
    counts.scatter_add_(1, ids, torch.ones_like(ids))
    return Routing(token_of, token_of * a.num_experts + experts,
                   counts.cumsum(1).to(torch.int32), counts.tolist())


def prepare(engine: Engine, batch: StepBatch, seed: int = 0) -> StepTensors:
    """Upload `batch`'s inputs to the engine's device."""
    dev = engine.device

    def ints(values: list[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(dev)

    decode_lens = batch.decode_lens()
    if engine.arch.rope_theta is not None:
        engine.rope(max([s.end for s in batch.seqs] + [1]))
    return StepTensors(
        batch=batch, token_ids=ints(batch.token_ids(engine.arch.vocab_size)),
        positions=ints(batch.positions()), slots=ints(batch.slot_mapping()),
        dec_tables=_tables(batch.decode_tables(), dev), dec_lens=ints(decode_lens, torch.int32),
        dec_max=max(decode_lens, default=1),
        pre_tables=_tables([s.block_table for s in batch.prefill], dev),
        pre_starts=ints(batch.prefill_starts(), torch.int32),
        pre_lens=ints([s.end for s in batch.prefill], torch.int32),
        pre_max_new=max([s.num_new for s in batch.prefill], default=1),
        pre_max_ctx=max([s.end for s in batch.prefill], default=1),
        logits_rows=None if batch.mode == "full" else ints(batch.logits_rows()),
        routing=route(engine, batch.padded_tokens, seed, batch.step) if engine.arch.moe
        else None)


@dataclass(slots=True)
class Buffers:
    """Activation buffers of one step (random-filled; see the module docstring)."""

    residual: torch.Tensor  # [padded, hidden]
    h: torch.Tensor  # [padded, hidden], the normalised input of each block
    qkv: torch.Tensor  # [padded, (Hq + 2 Hkv) d]
    qn: torch.Tensor | None  # [padded, Hq, d] (qk_norm)
    kn: torch.Tensor | None  # [padded, Hkv, d] (qk_norm)
    attn: torch.Tensor  # [padded, Hq, d]
    o: torch.Tensor  # [padded, hidden]
    up: torch.Tensor  # dense or shared expert: [padded, 2I] gated / [padded, I] plain
    act: torch.Tensor  # [padded, I]
    mlp: torch.Tensor  # [padded, hidden]
    last: torch.Tensor  # [seqs, hidden]
    logits: torch.Tensor  # [seqs, vocab]
    next_ids: torch.Tensor  # [seqs] int64
    router: torch.Tensor | None = None  # [padded, E]
    x_sorted: torch.Tensor | None = None  # [padded * k, hidden]
    e_up: torch.Tensor | None = None  # [padded * k, 2Ie]
    e_act: torch.Tensor | None = None  # [padded * k, Ie]
    e_out: torch.Tensor | None = None  # [padded * k, hidden]
    shared: torch.Tensor | None = None  # [padded, hidden]


def make_buffers(engine: Engine, batch: StepBatch) -> Buffers:
    """Buffers sized for `batch`, random-filled in the engine's dtype."""
    a, n = engine.arch, batch.padded_tokens
    seqs = len(batch.logits_rows())
    gen = torch.Generator(device=engine.device).manual_seed(batch.step)

    def buf(*shape: int) -> torch.Tensor:
        return torch.empty(shape, dtype=engine.dtype, device=engine.device).normal_(
            generator=gen)

    hq, hkv, d, h = a.num_heads, a.num_kv_heads, a.head_dim, a.hidden_size
    inter = a.shared_expert_intermediate_size if a.moe else a.intermediate_size
    gated = a.gated_mlp or a.moe
    b = Buffers(buf(n, h), buf(n, h), buf(n, (hq + 2 * hkv) * d),
                buf(n, hq, d) if a.qk_norm else None, buf(n, hkv, d) if a.qk_norm else None,
                buf(n, hq, d), buf(n, h), buf(n, (2 if gated else 1) * inter), buf(n, inter),
                buf(n, h), buf(seqs, h), buf(seqs, a.vocab_size),
                torch.zeros(seqs, dtype=torch.int64, device=engine.device))
    if a.moe:
        rows, ie = n * a.num_experts_per_tok, a.moe_intermediate_size
        b.router, b.x_sorted = buf(n, a.num_experts), buf(rows, h)
        b.e_up, b.e_act, b.e_out, b.shared = buf(rows, 2 * ie), buf(rows, ie), buf(rows, h), \
            buf(n, h)
    return b
