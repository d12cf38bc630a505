"""Roofline step time: each part takes max(bytes / HBM bandwidth, FLOPs / peak FLOP/s).

Per GPU with tensor-parallel degree t (Hq = heads/t, Hkv = kv_heads_per_gpu, d = head_dim,
L = layers, h = hidden, I' = intermediate/t, V' = vocab/t, m = 3 gated MLP or 2 for OPT,
w = weight bytes, kv = KV bytes per token per GPU, T = new tokens, S = sequences):
  linear:    bytes = w x (L x P + h x V') + T x w x (L x (4h + 2(Hq + Hkv)d + m I') + h)
             FLOPs = 2 x T x L x P + 2 x S x h x V'    (one logits row per sequence)
             where P = h(Hq + 2 Hkv)d + Hq d h + m h I' (weights of one layer's matmuls)
  attention: bytes = kv x sum(keys read) + T x (kv + 2 x L x Hq x d x w)  (KV write, q in, o out)
             FLOPs = 4 x L x Hq x d x sum(causal (query, key) pairs)
  overhead:  overhead_s + per_seq_overhead_s x S
MoE: P counts the router and shared expert; each token adds k experts' FLOPs and the step reads
the weights of the experts it touches, E x (1 - (1 - k/E)^T) under uniform routing (_mlp).
Bandwidth and peak are scaled by hbm_efficiency and flops_efficiency (1.0: an optimistic bound).
Tensor-parallel all-reduces are not modelled. Exactness: predict and predict_split agree exactly.
"""
from __future__ import annotations

from collections.abc import Sequence

from sim.cost.capacity import kv_bytes_per_token
from sim.cost.gpus import GpuSpec
from sim.cost.models import ModelConfig
from sim.cost.step_base import (
    DEFAULT_PER_SEQ_OVERHEAD_S,
    DEFAULT_STEP_OVERHEAD_S,
    ZERO_STEP,
    StepModel,
    StepTime,
    causal_pairs,
)


class RooflineStepModel(StepModel):
    """Analytic step time from the model's shapes and the GPU's datasheet numbers."""

    def __init__(self, model: ModelConfig, gpu: GpuSpec, tp: int = 1, *,
                 kv_cache_dtype: str = "auto", hbm_efficiency: float = 1.0,
                 flops_efficiency: float = 1.0, overhead_s: float = DEFAULT_STEP_OVERHEAD_S,
                 per_seq_overhead_s: float = DEFAULT_PER_SEQ_OVERHEAD_S) -> None:
        if not (0.0 < hbm_efficiency <= 1.0 and 0.0 < flops_efficiency <= 1.0):
            raise ValueError("roofline efficiencies must be in (0, 1]")
        if overhead_s < 0 or per_seq_overhead_s < 0:
            raise ValueError("roofline overheads must be >= 0")
        self.model, self.gpu, self.tp = model, gpu, tp
        self.window = model.sliding_window
        self.decode_context_cap = None if self.window is None else self.window - 1
        self.overhead_s, self.per_seq_overhead_s = overhead_s, per_seq_overhead_s
        bandwidth = gpu.hbm_bytes_per_s * hbm_efficiency
        peak = gpu.flops_per_s * flops_efficiency
        layers, h, w = model.num_layers, model.hidden_size, model.dtype_bytes
        hq, hkv, d = model.heads_per_gpu(tp), model.kv_heads_per_gpu(tp), model.head_dim
        mlp_params, mlp_act, expert = _mlp(model, tp)
        layer_params = h * (hq + 2 * hkv) * d + hq * d * h + mlp_params
        lm_head = h * model.vocab_size / tp
        act_per_token = w * (layers * (4 * h + 2 * (hq + hkv) * d + mlp_act) + h)
        kv = kv_bytes_per_token(model, tp, kv_cache_dtype)
        # Seconds per unit, so that predict_split is a handful of multiply-adds.
        self._lin_mem_const = w * (layers * layer_params + lm_head) / bandwidth
        self._lin_mem_token = act_per_token / bandwidth
        self._lin_flop_token = 2 * layers * (layer_params + model.num_experts_per_tok
                                             * expert) / peak
        self._lin_flop_seq = 2 * lm_head / peak
        # MoE: the experts a step touches, all read once (uniform routing, see _mlp).
        experts = model.num_experts
        self._exp_mem = (model.expert_bytes_per_param * layers * expert * experts / bandwidth)
        self._exp_miss = 1.0 - model.num_experts_per_tok / experts if experts else 1.0
        self._att_mem_key = kv / bandwidth
        self._att_mem_token = (kv + 2 * layers * hq * d * w) / bandwidth
        self._att_flop_pair = 4 * layers * hq * d / peak

    def batch_sums(self, num_decode: int, sum_decode_context: int,
                   prefills: Sequence[tuple[int, int]]) -> tuple[int, int, int]:
        """(new tokens, keys read, causal query-key pairs) of a step."""
        tokens = num_decode
        keys = pairs = sum_decode_context + num_decode
        window, cap = self.window, self.decode_context_cap
        for new, context in prefills:
            tokens += new
            keys += new + (context if cap is None or context < cap else cap)
            pairs += causal_pairs(new, context, window)
        return tokens, keys, pairs

    def linear_terms(self, tokens: int, num_seqs: int) -> tuple[float, float]:
        """(memory seconds, compute seconds) of the linear layers for `tokens` rows."""
        memory = self._lin_mem_const + self._lin_mem_token * tokens + self.expert_memory(tokens)
        return memory, self._lin_flop_token * tokens + self._lin_flop_seq * num_seqs

    def expert_memory(self, tokens: int) -> float:
        """The part of `linear_terms`' memory seconds that reads routed experts' weights (0
        for a dense model)."""
        if not self._exp_mem:
            return 0.0
        return self._exp_mem * (1.0 - self._exp_miss ** tokens)

    def attention_terms(self, tokens: int, keys: int, pairs: int) -> tuple[float, float]:
        """(memory seconds, compute seconds) of attention: K/V read and written, q and o."""
        return (self._att_mem_key * keys + self._att_mem_token * tokens,
                self._att_flop_pair * pairs)

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        num_seqs = num_decode + len(prefills)
        if num_seqs == 0:
            return ZERO_STEP
        tokens, keys, pairs = self.batch_sums(num_decode, sum_decode_context, prefills)
        # Each part is bound by memory or by compute, whichever is slower.
        linear, linear_flops = self.linear_terms(tokens, num_seqs)
        attention, attention_flops = self.attention_terms(tokens, keys, pairs)
        return StepTime(max(attention, attention_flops), max(linear, linear_flops),
                        self.overhead_s + self.per_seq_overhead_s * num_seqs)


def _mlp(model: ModelConfig, tp: int) -> tuple[float, float, float]:
    """Per layer and GPU: (weights every token uses, activation elements per token, weights of
    one routed expert).

    Dense: the MLP's matrices. MoE: the router and the shared expert for every token, and
    `num_experts_per_tok` experts per token. Routing is assumed uniform and independent per
    token, so T tokens touch E x (1 - (1 - k/E)^T) distinct experts in expectation, each read
    once from HBM; experts are split over `tp` GPUs as vLLM's default tensor-parallel MoE does.
    """
    h, mats = model.hidden_size, model.mlp_matrices
    if not model.moe:
        inter = model.intermediate_size / tp
        return mats * h * inter, mats * inter, 0.0
    shared = model.shared_expert_intermediate_size / tp
    width = model.moe_intermediate_size / tp
    used = model.num_experts * h + mats * h * shared
    act = model.num_experts + mats * (shared + model.num_experts_per_tok * width)
    return used, act, mats * h * width
