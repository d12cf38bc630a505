"""Sections of bench_kernels.py beyond decode: SDPA prefill baseline, cache ops, variant sweeps.

A sweep times one kernel family under several tile shapes / split-rule knobs on the shapes that
decide its defaults, so one GPU call picks them by measurement. Loaded by bench_kernels.py
from this folder (benchmarks/ is not a package).
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from kernels.copy_blocks import copy_blocks
from kernels.decode_config import DecodeConfig
from kernels.layer_timing import AttentionTimer, LayerShape, graph_us, median_us
from kernels.prefill_config import PrefillConfig
from kernels.reference import ref_prefill_attention, rel_error_per_seq_head
from kernels.reshape_and_cache import reshape_and_cache


def _lens(n: int, lo: int, hi: int) -> list[int]:
    rng = random.Random(0)
    return [rng.randint(lo, hi) for _ in range(n)]


def sdpa_prefill(t: AttentionTimer, new: list[int], prefix: list[int]) -> dict:
    """SDPA flash (causal aligned to the end) on contiguous copies; errors against float64."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    n, ctx, b = new[0], new[0] + prefix[0], len(new)
    lens = [ctx] * b
    tables = t.tables(lens)
    hkv = t.shape.num_kv_heads
    kc = t.k[tables.long()].reshape(b, ctx, hkv, -1).transpose(1, 2).contiguous()
    vc = t.v[tables.long()].reshape(b, ctx, hkv, -1).transpose(1, 2).contiguous()
    q = t.queries(b * n)
    q4 = q.view(b, n, t.shape.num_q_heads, -1).transpose(1, 2)
    bias = causal_lower_right(n, ctx)

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q4, kc, vc, attn_mask=bias, enable_gqa=True)

    res = {"sdpa_us": median_us(sdpa)}
    starts = [i * n for i in range(b + 1)]
    from kernels.prefill_attention import paged_prefill_attention

    out = paged_prefill_attention(q, t.k, t.v, tables, starts, lens, max_new_tokens=n)
    ref = ref_prefill_attention(q[: 2 * n], t.k, t.v, tables[:2].tolist(), starts[:3], lens[:2])
    seq = torch.arange(2, device=q.device).repeat_interleave(n)
    res["err64"] = float(rel_error_per_seq_head(out[: 2 * n], ref, seq).max())
    mine = sdpa().transpose(1, 2).reshape(b * n, t.shape.num_q_heads, -1)
    res["sdpa_err64"] = float(rel_error_per_seq_head(mine[: 2 * n], ref, seq).max())
    return res


def cache_ops(shape: LayerShape) -> dict:
    """reshape_and_cache (bf16 and fp8 caches) and copy_blocks: >= 1 GiB moves."""
    res: dict = {}
    tokens, bs = 512 * 1024, shape.block_size
    num_blocks = tokens // bs + 1
    dims = (num_blocks, bs, shape.num_kv_heads, shape.head_size)
    key = torch.randn((tokens, *dims[2:]), device="cuda", dtype=torch.bfloat16)
    val = torch.randn_like(key)
    slots = torch.randperm(tokens, device="cuda") + bs
    for name, dtype in (("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn)):
        k = torch.empty(dims, device="cuda", dtype=dtype)
        v = torch.empty_like(k)
        moved = 2 * tokens * shape.num_kv_heads * shape.head_size * (2 + k.element_size())
        us = median_us(lambda k=k, v=v: reshape_and_cache(key, val, k, v, slots, k_scale=0.05,
                                                          v_scale=0.05))
        res[f"reshape_{name}"] = {"us": us, "tbps": moved / us / 1e6, "bytes": moved}
        res[f"reshape_{name}_b256_us"] = median_us(
            lambda k=k, v=v: reshape_and_cache(key[:256], val[:256], k, v, slots[:256]))
    k = torch.randn(dims, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    pairs = (num_blocks - 1) // 2
    ids = torch.randperm(num_blocks - 1, device="cuda") + 1
    plan = torch.stack([ids[:pairs], ids[pairs: 2 * pairs]], dim=1)
    moved = 2 * 2 * pairs * bs * shape.num_kv_heads * shape.head_size * 2
    us = median_us(lambda: copy_blocks(k, v, plan))
    res["copy_blocks"] = {"us": us, "tbps": moved / us / 1e6, "bytes": moved}
    return res


def _times(calls: dict[str, object]) -> dict[str, float | str]:
    out: dict[str, float | str] = {}
    for name, make in calls.items():
        try:
            out[name] = median_us(make(), warmup=10, rep=40)
        except Exception as exc:  # noqa: BLE001 - a variant that fails to build is a result too
            out[name] = f"error: {exc!r}"[:300]
    return out


DECODE_VARIANTS = {
    "default": None,
    "bn128w4": DecodeConfig(block_n=128, num_warps=4),
    "bn128w2": DecodeConfig(block_n=128, num_warps=2),
    "bn32w2": DecodeConfig(block_n=32, num_warps=2),
    "bn64w4": DecodeConfig(block_n=64, num_warps=4),
    "rag6_w2": DecodeConfig(num_warps=2, ragged_programs_per_sm=6),
    "rag24_w2": DecodeConfig(num_warps=2, ragged_programs_per_sm=24),
}
DECODE_SHAPES = {"1x4096": [4096], "8x4096": [4096] * 8, "32x4096": [4096] * 32,
                 "16x16384": [16384] * 16, "64x4096": [4096] * 64,
                 "r64": _lens(64, 16, 8192), "r256": _lens(256, 16, 2048),
                 "r16": _lens(16, 1000, 32768), "r128": _lens(128, 100, 4000)}


def sweep_decode(t16: AttentionTimer, t8: AttentionTimer) -> dict:
    return {shape: _times({v: (lambda lens=lens, c=c: t16.decode_call(lens, config=c))
                           for v, c in DECODE_VARIANTS.items()})
            for shape, lens in DECODE_SHAPES.items()}


def sweep_small(t16: AttentionTimer, t8: AttentionTimer) -> dict:
    res = {}
    for name, cfg in (("default", None),
                      ("min128", DecodeConfig(num_warps=2, min_tokens_per_split=128)),
                      ("min512", DecodeConfig(num_warps=2, min_tokens_per_split=512)),
                      ("min256_bn32", DecodeConfig(block_n=32, num_warps=2))):
        for lens in ([4096], [4096] * 8):
            call = t16.decode_call(lens, config=cfg)
            res[f"{len(lens)}x4096/{name}"] = {"eager": median_us(call), "graph": graph_us(call)}
    return res


def sweep_fp8(t16: AttentionTimer, t8: AttentionTimer) -> dict:
    variants = {"default": None, "bn64w2": DecodeConfig(block_n=64, num_warps=2),
                "bn64w4": DecodeConfig(block_n=64, num_warps=4),
                "bn128w2": DecodeConfig(block_n=128, num_warps=2),
                "bn128w8": DecodeConfig(block_n=128, num_warps=8)}
    return {f"{b}x{c}": _times({v: (lambda b=b, c=c, cfg=cfg: t8.decode_call([c] * b, config=cfg))
                                for v, cfg in variants.items()})
            for b, c in ((64, 4096), (16, 16384))}


def sweep_extend(t16: AttentionTimer, t8: AttentionTimer) -> dict:
    variants = {"default": None, "fused": DecodeConfig(block_n=64, num_warps=4),
                "bn128w4": DecodeConfig(block_n=128, num_warps=4, fused_reduce=False),
                "bn64w8": DecodeConfig(block_n=64, num_warps=8, fused_reduce=False),
                "min1024": DecodeConfig(num_warps=4, min_tokens_per_split=1024,
                                        fused_reduce=False),
                "min128": DecodeConfig(num_warps=4, min_tokens_per_split=128,
                                       fused_reduce=False)}
    return {f"{n}x16/16384": _times({v: (lambda n=n, c=c: t16.extend_call(
        [16] * n, [16384] * n, decode_config=c)) for v, c in variants.items()}) for n in (1, 16)}


PREFILL_VARIANTS = {"128/64/4/3": PrefillConfig(128, 64, 4, 3),
                    "128/128/8/3": PrefillConfig(128, 128, 8, 3),
                    "128/64/4/2": PrefillConfig(128, 64, 4, 2),
                    "128/32/4/3": PrefillConfig(128, 32, 4, 3),
                    "128/128/4/2": PrefillConfig(128, 128, 4, 2)}


def sweep_prefill(t16: AttentionTimer, t8: AttentionTimer) -> dict:
    return _times({v: (lambda c=c: t16.extend_call([2048] * 8, [2048] * 8, config=c))
                   for v, c in PREFILL_VARIANTS.items()})


def sweep_mixed(t16: AttentionTimer, t8: AttentionTimer) -> dict:
    dec, new, prefix = [4096] * 64, [2048], [0]
    return _times({"default": lambda: t16.mixed_call(dec, new, prefix),
                   "128/128/8/3": lambda: t16.mixed_call(
                       dec, new, prefix, prefill_config=PrefillConfig(128, 128, 8, 3))})


SWEEPS = {"decode": sweep_decode, "small": sweep_small, "fp8": sweep_fp8,
          "extend": sweep_extend, "prefill": sweep_prefill, "mixed": sweep_mixed}


def run_sweep(name: str, t16: AttentionTimer, t8: AttentionTimer) -> dict:
    try:
        res = SWEEPS[name](t16, t8)
    except Exception as exc:  # noqa: BLE001 - report and keep the other sweeps
        res = {"error": repr(exc)[:2000]}
    print(f"sweep {name}: {res}", flush=True)
    return res
