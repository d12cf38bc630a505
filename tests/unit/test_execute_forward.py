"""The executed forward computes a real decoder: its logits match a float64 reference forward.

The reference is written independently here: plain torch in float64, rotary angles from the
positions, K/V written into a copy of the cache through the logged slots, and attention from
kernels/reference.py on the logged block tables. A step whose rows went to the wrong kernel,
position, slot, table or expert would change the logits. An fp8 cache's reference writes the
rows quantised (kernels/fp8.py) and reads them times the header's K and V scales.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from kernels.cache_layout import as_v_layout, set_cache_rows
from kernels.execute.arch import Architecture
from kernels.execute.batch import StepBatch, capture_sizes, make_batch
from kernels.execute.forward import Forward
from kernels.execute.inputs import make_buffers, prepare
from kernels.execute.model import Engine
from kernels.fp8 import quantize
from kernels.reference import Variant, ref_decode_attention, ref_prefill_attention
from kernels.validate.log import LogHeader, StepRecord, iter_log, iter_objects
from tests.unit.validate_logkit import scenario_log

MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
       "shared_expert_intermediate_size": 16}
FP8 = {"kv_cache_dtype": "fp8", "k_scale": 0.5, "v_scale": 2.0}
# gpt-oss's attention: sinks, and a 5-token window on layer 0 only (contexts reach 21 tokens).
OSS = {"attention_sinks": True, "sliding_window": 5,
       "layer_types": ["sliding_attention", "full_attention"]}


def _log(tmp_path: Path, arch: dict[str, Any]) -> tuple[LogHeader, Architecture,
                                                        list[StepRecord]]:
    path = scenario_log(tmp_path / "log.jsonl.gz", arch=arch)
    items = list(iter_log(path))
    hdr = items[0]
    assert isinstance(hdr, LogHeader)
    model = next(iter_objects(path))[1]["model"]
    recs = [i for i in items[1:] if isinstance(i, StepRecord)]
    return hdr, Architecture.from_header(model, "log"), recs


def _engine(hdr: LogHeader, a: Architecture) -> Engine:
    return Engine(a, hdr.block_size, hdr.num_gpu_blocks, hdr.num_cpu_blocks,
                  torch.device("cpu"), seed=3, k_scale=hdr.k_scale, v_scale=hdr.v_scale)


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    d = x.shape[-1]
    freqs = torch.arange(0, d, 2, device=x.device).double() / d
    angles = pos.double()[:, None] / theta ** freqs
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _mlp(h: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    gate, lin = (h @ up.double().T).chunk(2, dim=-1)
    return (F.silu(gate) * lin) @ down.double().T


def _moe(e: Engine, h: torch.Tensor, routing: Any, layer: int) -> torch.Tensor:
    a, w = e.arch, e.layer
    probs = torch.softmax(h @ w.router.double().T, dim=-1)
    out = torch.zeros_like(h)
    for flat in routing.prob_index[layer].tolist():
        tok, ex = divmod(flat, a.num_experts)
        out[tok] += probs[tok, ex] * _mlp(h[tok:tok + 1], w.experts_up[ex], w.experts_down[ex])[0]
    if w.shared_up is not None:
        out += _mlp(h, w.shared_up, w.shared_down)
    return out


def _attention(e: Engine, batch: StepBatch, q: torch.Tensor, kv: torch.Tensor,
               layer: int) -> torch.Tensor:
    kc, vc = kv[layer % kv.shape[0], 0], as_v_layout(kv[layer % kv.shape[0], 1])
    scales = {"k_scale": e.k_scale, "v_scale": e.v_scale} if e.arch.fp8_kv else {}
    var = Variant(window=e.arch.window(layer), sinks=e.layer.sinks, **scales)
    rows = batch.num_decode_rows
    out = torch.zeros_like(q)
    out[:rows] = ref_decode_attention(q[:rows], kc, vc, batch.decode_tables(),
                                      batch.decode_lens(), variant=var)
    chunk = batch.num_tokens - len(batch.decode)
    if chunk:
        out[rows:rows + chunk] = ref_prefill_attention(
            q[rows:rows + chunk], kc, vc, [s.block_table for s in batch.prefill],
            batch.prefill_starts(), [s.end for s in batch.prefill], variant=var)
    return out


def reference_logits(e: Engine, batch: StepBatch, kv: torch.Tensor, routing: Any
                     ) -> torch.Tensor:
    """float64 logits of `batch` on a copy `kv` of the cache before the step."""
    a, w, eps, dev = e.arch, e.layer, e.arch.rms_norm_eps, e.device
    pos = torch.tensor(batch.positions(), device=dev)
    slots = torch.tensor(batch.slot_mapping(), device=dev)
    real = slots >= 0
    residual = e.embed[torch.tensor(batch.token_ids(a.vocab_size), device=dev)].double()
    hq, hkv, d = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.head_dim
    for layer in range(a.num_layers):
        qkv = _norm(residual, w.ln1, eps) @ w.qkv.double().T
        if w.qkv_bias is not None:
            qkv = qkv + w.qkv_bias.double()
        q = qkv[:, :hq].unflatten(1, (a.num_heads, d))
        k = qkv[:, hq:hq + hkv].unflatten(1, (a.num_kv_heads, d))
        v = qkv[:, hq + hkv:].unflatten(1, (a.num_kv_heads, d))
        if a.qk_norm:
            q, k = _norm(q, w.q_norm, eps), _norm(k, w.k_norm, eps)
        q, k = _rope(q, pos, a.rope_theta), _rope(k, pos, a.rope_theta)
        pair = kv[layer % kv.shape[0]]
        for cache, rows, scale in ((pair[0], k, e.k_scale), (as_v_layout(pair[1]), v, e.v_scale)):
            new = rows[real].to(e.dtype)  # the projection's output, as the kernels see it
            set_cache_rows(cache, slots[real], quantize(new, scale) if a.fp8_kv else new)
        attn = _attention(e, batch, q.to(e.dtype), kv, layer).double()
        residual = residual + attn.flatten(1) @ w.o.double().T
        h = _norm(residual, w.ln2, eps)
        residual = residual + (_moe(e, h, routing, layer) if a.moe else _mlp(h, w.up, w.down))
    h = _norm(residual, e.final_norm, eps)[torch.tensor(batch.logits_rows(), device=dev)]
    return h @ e.lm_head.double().T


@pytest.mark.parametrize("arch", [{}, {"qkv_bias": True, "qk_norm": True}, MOE, FP8, OSS],
                         ids=["dense", "bias-qknorm", "moe", "fp8-cache", "sinks-windows"])
def test_logits_match_reference(tmp_path: Path, arch: dict[str, Any]) -> None:
    """Decode-only (padded), prefill and mixed steps give the reference logits (fp32; fp8
    cache: K and V quantised with scales 0.5 and 2)."""
    hdr, a, recs = _log(tmp_path, arch)
    engine = _engine(hdr, a)
    assert engine.kv.dtype == (torch.float8_e4m3fn if arch is FP8 else torch.float32)
    # fp8: the reference's rows round to a neighbouring e4m3 value now and then (measured
    # 1.5-2.2e-4); the kernels ignoring the scales gives 0.38-0.43.
    tol = 2e-3 if arch is FP8 else 1e-4
    modes = set()
    for rec in (recs[2], recs[4], recs[8]):
        batch = make_batch(rec, capture_sizes())
        modes.add((batch.mode, batch.padded_tokens > batch.num_tokens, bool(batch.prefill)))
        t = prepare(engine, batch, seed=1)
        b = make_buffers(engine, batch)
        kv = engine.kv.clone()
        Forward(engine, t, b)()
        ref = reference_logits(engine, batch, kv, t.routing)
        err = (b.logits.double() - ref).abs().max() / ref.abs().max()
        assert err < tol, (rec.step, float(err))
        assert torch.equal(b.next_ids, b.logits.argmax(-1))
    assert ("full", True, False) in modes and ("piecewise", True, True) in modes


@pytest.mark.parametrize("mutation", ["positions", "decode_lens", "slots"])
def test_a_wrong_input_is_caught(tmp_path: Path, mutation: str) -> None:
    """A shifted position, a shortened decode context or a moved slot changes the logits, so
    the reference comparison above can fail."""
    hdr, a, recs = _log(tmp_path, {})
    engine = _engine(hdr, a)
    batch = make_batch(recs[2], capture_sizes())
    assert batch.decode and batch.prefill
    t = prepare(engine, batch)
    b = make_buffers(engine, batch)
    kv = engine.kv.clone()
    if mutation == "positions":
        t.positions += 1
    elif mutation == "decode_lens":
        t.dec_lens[0] -= 1
    else:
        t.slots[0] = t.slots[0] + 1
    Forward(engine, t, b)()
    ref = reference_logits(engine, batch, kv, None)
    assert (b.logits.double() - ref).abs().max() / ref.abs().max() > 1e-3
