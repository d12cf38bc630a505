"""The decoder forward of one step, every launch tagged with the part of the step it belongs to.

Per layer (vLLM's Llama/Qwen/Mixtral order):

    add + RMSNorm -> QKV GEMM (+bias) -> [per-head Q/K RMSNorm] -> rotary -> reshape_and_cache
    -> paged decode attention (decode rows) + paged prefill attention (chunk rows) -> O GEMM
    -> add + RMSNorm -> gate/up GEMM -> SiLU-and-mul -> down GEMM          (dense)
                     -> router GEMM -> softmax/top-k -> gather -> grouped expert GEMMs
                        -> SiLU-and-mul -> weighted scatter-add [+ shared expert]  (MoE)

then the final add + RMSNorm, the LM head for each sequence's last token, and argmax. Parts:
"attention" (cache write and paged attention), "linear" (every GEMM, the LM head included) and
"other" (embedding, norms, rotary, activation, routing glue, gathers, argmax). A Forward made
with a subset of parts launches only those, reading the stale buffers of the others. An fp8
cache is written quantised and read dequantised with the engine's K and V scales; a layer's
attention takes its own window (`Architecture.window`) and, with sinks, the layer's sink logits.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from kernels.decode_attention import paged_decode_attention
from kernels.execute.fused import rms_norm, rotary, silu_and_mul
from kernels.execute.inputs import Buffers, StepTensors
from kernels.execute.model import Engine, LayerWeights
from kernels.prefill_attention import paged_prefill_attention
from kernels.reshape_and_cache import reshape_and_cache

PARTS = ("attention", "linear", "other")
# The prefill wrapper reads the longest context from the device (a sync, which graph capture
# forbids) unless it is given; pass it wherever the wrapper takes it.
_PREFILL_MAX_CONTEXT = "max_context_len" in inspect.signature(paged_prefill_attention).parameters


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            out: torch.Tensor) -> None:
    if bias is None:
        torch.mm(x, weight.t(), out=out)
    else:
        torch.addmm(bias, x, weight.t(), out=out)


class Forward:
    """Callable forward of one prepared step; `trace` (a list) records each launch's shapes."""

    def __init__(self, engine: Engine, t: StepTensors, b: Buffers,
                 parts: tuple[str, ...] = PARTS, trace: list[dict[str, Any]] | None = None
                 ) -> None:
        unknown = set(parts) - set(PARTS)
        if unknown:
            raise ValueError(f"unknown parts {sorted(unknown)}; parts are {PARTS}")
        self.e, self.t, self.b, self.trace = engine, t, b, trace
        self.attention, self.linear, self.other = (p in parts for p in PARTS)
        self.w: LayerWeights = engine.layer

    def note(self, op: str, layer: int, **info: Any) -> None:
        if self.trace is not None:
            self.trace.append({"op": op, "layer": layer, **info})

    def __call__(self) -> None:
        if self.other:
            torch.index_select(self.e.embed, 0, self.t.token_ids, out=self.b.residual)
        self.note("embed", -1, rows=self.t.token_ids.shape[0])
        for layer in range(self.e.arch.num_layers):
            self._attention_block(layer)
            if self.e.arch.moe:
                self._moe(layer)
            else:
                self._dense_mlp(layer, self.w.up, self.w.down, self.b.mlp)
        self._head()

    def _norm(self, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
              residual: torch.Tensor | None) -> None:
        if self.other:
            rms_norm(x, weight, self.e.arch.rms_norm_eps, out, residual=residual)

    def _attention_block(self, layer: int) -> None:
        a, b, w = self.e.arch, self.b, self.w
        first = layer == 0
        self._norm(b.residual if first else b.mlp, w.ln1, b.h, None if first else b.residual)
        if self.linear:
            _linear(b.h, w.qkv, w.qkv_bias, b.qkv)
        self.note("qkv", layer, m=b.h.shape[0], n=w.qkv.shape[0], k=w.qkv.shape[1])
        hq, hkv, d = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.head_dim
        q = b.qkv[:, :hq].unflatten(1, (a.num_heads, d))
        k = b.qkv[:, hq : hq + hkv].unflatten(1, (a.num_kv_heads, d))
        v = b.qkv[:, hq + hkv :].unflatten(1, (a.num_kv_heads, d))
        if b.qn is not None and b.kn is not None and w.q_norm is not None \
                and w.k_norm is not None:
            self._norm(q, w.q_norm, b.qn, None)
            self._norm(k, w.k_norm, b.kn, None)
            q, k = b.qn, b.kn
        if self.other and a.rope_theta is not None:
            assert self.e.cos_sin is not None
            rotary(q, k, self.t.positions, self.e.cos_sin)
        if self.attention:
            self._attend(layer, q, k, v)
        if self.linear:
            _linear(b.attn.view(b.attn.shape[0], -1), w.o, None, b.o)
        self._norm(b.o, w.ln2, b.h, b.residual)

    def _attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        t, b = self.t, self.b
        k_cache, v_cache = self.e.cache(layer)
        scales = {"k_scale": self.e.k_scale, "v_scale": self.e.v_scale}
        reshape_and_cache(k, v, k_cache, v_cache, t.slots, **scales)
        variant = {"sliding_window": self.e.arch.window(layer), "sinks": self.w.sinks, **scales}
        rows = t.batch.num_decode_rows
        if rows:
            paged_decode_attention(q[:rows], k_cache, v_cache, t.dec_tables, t.dec_lens,
                                   max_context_len=t.dec_max, out=b.attn[:rows], **variant)
        chunk = t.batch.num_tokens - len(t.batch.decode)
        if chunk:
            extra = {"max_context_len": t.pre_max_ctx} if _PREFILL_MAX_CONTEXT else {}
            paged_prefill_attention(q[rows : rows + chunk], k_cache, v_cache, t.pre_tables,
                                    t.pre_starts, t.pre_lens, max_new_tokens=t.pre_max_new,
                                    out=b.attn[rows : rows + chunk], **extra, **variant)
        if self.trace is not None:
            self.note("attention", layer, cache_dtype=str(k_cache.dtype), **scales,
                      window=variant["sliding_window"], sinks=self.w.sinks is not None,
                      slots=t.slots.tolist(), decode_rows=rows,
                      decode_lens=t.dec_lens.tolist(), decode_tables=t.dec_tables.tolist(),
                      prefill_rows=chunk, prefill_starts=t.pre_starts.tolist(),
                      prefill_lens=t.pre_lens.tolist(), prefill_tables=t.pre_tables.tolist(),
                      cache=layer % self.e.kv.shape[0])

    def _dense_mlp(self, layer: int, up: torch.Tensor | None, down: torch.Tensor | None,
                   out: torch.Tensor) -> None:
        b = self.b
        assert up is not None and down is not None
        if self.linear:
            _linear(b.h, up, None, b.up)
        if self.other:
            if self.e.arch.gated_mlp or self.e.arch.moe:
                silu_and_mul(b.up, b.act)
            else:
                torch.relu(b.up, out=b.act)
        if self.linear:
            _linear(b.act, down, None, out)
        self.note("mlp", layer, m=b.h.shape[0], n=up.shape[0], k=up.shape[1])

    def _moe(self, layer: int) -> None:
        a, b, w, r = self.e.arch, self.b, self.w, self.t.routing
        assert r is not None and b.router is not None and b.x_sorted is not None
        assert b.e_up is not None and b.e_act is not None and b.e_out is not None
        assert w.router is not None and w.experts_up is not None and w.experts_down is not None
        if self.linear:
            _linear(b.h, w.router, None, b.router)
        weights = b.e_out[:, 0]
        if self.other:
            probs = torch.softmax(b.router, dim=-1, dtype=torch.float32)
            torch.topk(probs, a.num_experts_per_tok, dim=-1)
            weights = probs.view(-1).index_select(0, r.prob_index[layer])
            torch.index_select(b.h, 0, r.token_of[layer], out=b.x_sorted)
        up = b.e_up
        if self.linear:
            up = torch._grouped_mm(b.x_sorted, w.experts_up.transpose(-2, -1),
                                   offs=r.offs[layer])
        if self.other:
            silu_and_mul(up, b.e_act)
        y = b.e_out
        if self.linear:
            y = torch._grouped_mm(b.e_act, w.experts_down.transpose(-2, -1), offs=r.offs[layer])
        if self.other:
            b.mlp.zero_()
            b.mlp.index_add_(0, r.token_of[layer], y * weights.to(y.dtype)[:, None])
        self.note("moe", layer, rows=b.x_sorted.shape[0], counts=r.counts[layer])
        if w.shared_up is not None and b.shared is not None:
            self._dense_mlp(layer, w.shared_up, w.shared_down, b.shared)
            if self.other:
                b.mlp.add_(b.shared)

    def _head(self) -> None:
        b, t = self.b, self.t
        self._norm(b.mlp, self.e.final_norm, b.h, b.residual)
        rows = b.h
        if t.logits_rows is not None:
            rows = b.last
            if self.other:
                torch.index_select(b.h, 0, t.logits_rows, out=b.last)
        if self.linear:
            _linear(rows, self.e.lm_head, None, b.logits)
        if self.other:
            torch.argmax(b.logits, dim=-1, out=b.next_ids)
        self.note("lm_head", -1, m=rows.shape[0], n=self.e.lm_head.shape[0])
