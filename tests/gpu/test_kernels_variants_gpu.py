"""GPU tests of the fp8 cache, model variants and kernel blocks at real sizes (skipped w/o CUDA).

fp8 (e4m3, per-tensor scales): reshape_and_cache must quantise bit for bit as
kernels.fp8.quantize does; attention must match float64 over the dequantised values within
the bf16 output bound. Soft-capping, attention sinks, chunked local attention and sliding
windows in decode, short extends and prefill; kernel blocks of 16 under manager blocks of
32/64 through allocator/block_table.py's mapping rule. Inputs come from a fresh, printed seed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from allocator.block_table import BlockTable
from kernels.cache_layout import cache_rows, new_kv_cache, with_v_layout
from kernels.decode_attention import paged_decode_attention
from kernels.decode_config import DecodeConfig
from kernels.fp8 import quantize
from kernels.prefill_attention import paged_prefill_attention
from kernels.reference import (
    Variant,
    ref_decode_attention,
    ref_prefill_attention,
    rel_error_per_seq_head,
)
from kernels.reshape_and_cache import reshape_and_cache
from kernels.testing import TOLERANCE, fresh_seed, make_case, poisoned, random_queries

pytestmark = pytest.mark.gpu
DEV = "cuda"
LENS = [1, 15, 16, 17, 1000, 2047, 4096, 9001]
SEQS = [(700, 700), (2048 + 517, 517), (1500, 1), (6000, 16), (300, 7)]


def _fp8_case(lens, var, hkv=8, d=128, bs=16, dtype=torch.bfloat16, v_layout="token_major"):
    case = make_case(lens, hkv, d, bs, dtype, DEV)
    case.k_cache = quantize(case.k_cache.float() * var.k_scale * 4, var.k_scale)
    v = quantize(case.v_cache.float() * var.v_scale * 4, var.v_scale)
    case.v_cache = with_v_layout(v, v_layout)
    return case


def _decode(case, lens, var, dtype=torch.bfloat16, hq=32, **kw):
    q = random_queries((len(lens), hq, case.k_cache.shape[-1]), dtype, DEV, case.seed)
    out = poisoned(q)
    paged_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, lens, out=out,
                           soft_cap=var.soft_cap, sinks=var.sinks, sliding_window=var.window,
                           attention_chunk_size=var.chunk, k_scale=var.k_scale,
                           v_scale=var.v_scale, **kw)
    ref = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, lens,
                               variant=var)
    return rel_error_per_seq_head(out, ref).max()


def _prefill(case, seqs, var, dtype=torch.bfloat16, hq=32, **kw):
    lens = [c for c, _ in seqs]
    starts = [0]
    for _, n in seqs:
        starts.append(starts[-1] + n)
    q = random_queries((starts[-1], hq, case.k_cache.shape[-1]), dtype, DEV, case.seed)
    out = poisoned(q)
    paged_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens,
                            out=out, soft_cap=var.soft_cap, sinks=var.sinks,
                            sliding_window=var.window, attention_chunk_size=var.chunk,
                            k_scale=var.k_scale, v_scale=var.v_scale, **kw)
    ref = ref_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens,
                                variant=var)
    token_seq = torch.repeat_interleave(torch.arange(len(seqs)), torch.tensor([n for _, n in seqs]))
    return rel_error_per_seq_head(out, ref, token_seq).max()


def test_reshape_and_cache_fp8_bit_exact():
    """The GPU's quantisation equals kernels.fp8.quantize bit for bit (ties, subnormals, +-448)."""
    seed = fresh_seed()
    gen = torch.Generator(device=DEV).manual_seed(seed)
    k = torch.zeros((512, 16, 8, 128), dtype=torch.float8_e4m3fn, device=DEV)
    v = torch.zeros_like(k)
    scale = torch.logspace(-5, 4, 128, device=DEV)
    key = (torch.randn((4000, 8, 128), generator=gen, device=DEV) * scale).to(torch.bfloat16)
    value = torch.randn((4000, 8, 128), generator=gen, device=DEV).to(torch.float16)
    slots = torch.randperm(512 * 16, generator=gen, device=DEV)[:4000]
    reshape_and_cache(key, value, k, v, slots, k_scale=0.37, v_scale=0.011)
    got_k, got_v = k.view(-1, 8, 128)[slots], v.view(-1, 8, 128)[slots]
    assert torch.equal(got_k.view(torch.uint8), quantize(key, 0.37).view(torch.uint8)), seed
    assert torch.equal(got_v.view(torch.uint8), quantize(value, 0.011).view(torch.uint8)), seed


def test_reshape_and_cache_fp8_transposed_v():
    """Writes into a V stored transposed per block land bit for bit where token-major V's do."""
    seed = fresh_seed()
    gen = torch.Generator(device=DEV).manual_seed(seed)
    key = torch.randn((4000, 8, 128), generator=gen, device=DEV).to(torch.bfloat16)
    value = (torch.randn((4000, 8, 128), generator=gen, device=DEV) * 30).to(torch.bfloat16)
    slots = torch.randperm(512 * 16, generator=gen, device=DEV)[:4000]
    k, v = new_kv_cache(512, 16, 8, 128, torch.float8_e4m3fn, DEV, v_layout="transposed")
    reshape_and_cache(key, value, k, v, slots, k_scale=0.37, v_scale=0.011)
    got = cache_rows(v, slots).view(torch.uint8)
    assert torch.equal(got, quantize(value, 0.011).view(torch.uint8)), seed


LAYOUTS = ["token_major", "transposed"]


@pytest.mark.parametrize("v_layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kw", [{}, {"num_splits": 5}, {"sliding_window": 1000}])
def test_decode_fp8(dtype, kw, v_layout):
    """Decode over an fp8 cache (V token-major or transposed per block) against float64 over
    the dequantised values."""
    kw = dict(kw)
    var = Variant(k_scale=0.02, v_scale=0.5, window=kw.pop("sliding_window", None))
    case = _fp8_case(LENS, var, v_layout=v_layout)
    err = _decode(case, LENS, var, dtype, **kw)
    assert err < TOLERANCE[dtype], f"seed {case.seed}: {err:.3e}"


WIDEN_CASES = [(128, DecodeConfig(block_n=64, num_warps=2)),
               (128, DecodeConfig(block_n=128, num_warps=4)),
               (64, DecodeConfig(block_n=64, num_warps=2, num_stages=3)),
               (256, DecodeConfig(block_n=32, num_warps=4))]


@pytest.mark.parametrize("widen", ["asm", "asm_v"])
@pytest.mark.parametrize("case_no", range(len(WIDEN_CASES)))
def test_decode_fp8_widen(widen, case_no):
    """The packed PTX widening of fp8 tiles (DecodeConfig.fp8_widen) in several tile shapes and
    head sizes: within the bf16 bound of float64, and within two bf16 steps of Triton's cast
    (the dots may group the keys differently: kWidth 2 against 4)."""
    d, cfg = WIDEN_CASES[case_no]
    var = Variant(k_scale=0.02, v_scale=0.5)
    lens = LENS[:6]
    case = _fp8_case(lens, var, d=d)
    q = random_queries((len(lens), 32, d), torch.bfloat16, DEV, case.seed)
    outs = {}
    for name in (widen, "cast"):
        outs[name] = poisoned(q)
        paged_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, lens,
                               out=outs[name], k_scale=0.02, v_scale=0.5,
                               config=replace(cfg, fp8_widen=name))
    ref = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, lens,
                               variant=var)
    err = rel_error_per_seq_head(outs[widen], ref).max()
    assert err < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err:.3e}"
    diff = rel_error_per_seq_head(outs[widen], outs["cast"].double()).max()
    assert diff < 2**-7, f"seed {case.seed}: {widen} and cast differ by {diff:.3e}"


PIPELINE_CASES = {
    "table_asm_64_s3": DecodeConfig(block_n=64, num_warps=2, num_stages=3, pipeline="table_asm"),
    "table_asm_32_s4": DecodeConfig(block_n=32, num_warps=2, num_stages=4, pipeline="table_asm"),
    "prefetch_64_w4": DecodeConfig(block_n=64, num_warps=4, num_stages=1, pipeline="prefetch"),
}


@pytest.mark.parametrize("fp8", [False, True, "transposed"])
@pytest.mark.parametrize("name", list(PIPELINE_CASES))
def test_decode_pipelines(name, fp8):
    """The block table read through PTX (Triton multi-buffers K/V) and the hand-prefetched
    loop (which a transposed V replaces by the PTX table read), bf16 and fp8 caches, whole and
    split, against float64."""
    var = Variant(k_scale=0.02, v_scale=0.5) if fp8 else Variant()
    layout = "transposed" if fp8 == "transposed" else "token_major"
    case = (_fp8_case(LENS, var, v_layout=layout) if fp8
            else make_case(LENS, 8, 128, 16, torch.bfloat16, DEV))
    for kw in ({}, {"num_splits": 7}):
        err = _decode(case, LENS, var, config=PIPELINE_CASES[name], **kw)
        assert err < TOLERANCE[torch.bfloat16], f"{kw} seed {case.seed}: {err:.3e}"


@pytest.mark.parametrize("v_layout", LAYOUTS)
def test_prefill_and_extend_fp8(v_layout):
    """Prefill chunks and short extends over an fp8 cache."""
    var = Variant(k_scale=0.02, v_scale=0.5)
    case = _fp8_case([c for c, _ in SEQS], var, v_layout=v_layout)
    assert _prefill(case, SEQS, var) < TOLERANCE[torch.bfloat16], f"seed {case.seed}"
    short = [(c, n) for c, n in SEQS if n <= 16]
    case = _fp8_case([c for c, _ in short], var, v_layout=v_layout)
    assert _prefill(case, short, var) < TOLERANCE[torch.bfloat16], f"seed {case.seed}"


@pytest.mark.parametrize(("hq", "hkv", "d", "bs"),
                         [(32, 8, 128, 8), (32, 8, 128, 32), (16, 2, 64, 64), (8, 8, 256, 16),
                          (28, 4, 128, 64)])
def test_transposed_v_head_and_block_sizes(hq, hkv, d, bs):
    """fp8 over a transposed V: decode (whole and split), prefill chunks and extends, GQA groups
    1-8, head sizes 64-256, blocks of 8-64 tokens (tiles of several blocks, tiles inside one)."""
    var = Variant(k_scale=0.02, v_scale=0.5)
    case = _fp8_case(LENS, var, hkv=hkv, d=d, bs=bs, v_layout="transposed")
    for kw in ({}, {"num_splits": 3}):
        err = _decode(case, LENS, var, hq=hq, **kw)
        assert err < TOLERANCE[torch.bfloat16], f"{kw} seed {case.seed}: {err:.3e}"
    case = _fp8_case([c for c, _ in SEQS], var, hkv=hkv, d=d, bs=bs, v_layout="transposed")
    err = _prefill(case, SEQS, var, hq=hq)
    assert err < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err:.3e}"


VARIANTS = {
    "softcap": Variant(soft_cap=2.0),
    "sinks": Variant(sinks=torch.linspace(-3, 6, 32)),
    "chunk": Variant(chunk=1024),
    "window_sinks": Variant(window=128, sinks=torch.linspace(-2, 2, 32)),
    "all": Variant(soft_cap=3.0, sinks=torch.linspace(0, 4, 32), chunk=2048, window=700),
}


def _on_device(var: Variant) -> Variant:
    return var if var.sinks is None else replace(var, sinks=var.sinks.to(DEV))


@pytest.mark.parametrize("name", list(VARIANTS))
def test_decode_variants(name):
    """Gemma 2 soft-capping, gpt-oss sinks, Llama 4 local chunks, windows: split and whole."""
    var = _on_device(VARIANTS[name])
    case = make_case(LENS, 8, 128, 16, torch.bfloat16, DEV)
    for kw in ({}, {"num_splits": 7}):
        err = _decode(case, LENS, var, **kw)
        assert err < TOLERANCE[torch.bfloat16], f"{kw} seed {case.seed}: {err:.3e}"


@pytest.mark.parametrize("name", list(VARIANTS))
def test_prefill_variants(name):
    """The same variants in prefill chunks (query tiles) and short extends (split-K items)."""
    var = _on_device(VARIANTS[name])
    case = make_case([c for c, _ in SEQS], 8, 128, 16, torch.bfloat16, DEV)
    err = _prefill(case, SEQS, var)
    assert err < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err:.3e}"


@pytest.mark.parametrize("manager_block", [32, 64])
def test_kernel_blocks_under_manager_blocks(manager_block):
    """Kernel blocks of 16 under manager blocks of 32/64, ids from BlockTable's mapping rule."""
    lens = [33, 700, 4096, 5]
    case = make_case(lens, 8, 128, manager_block, torch.bfloat16, DEV)
    ratio = manager_block // 16
    arange = list(range(ratio))
    kernel_tables = [BlockTable.map_to_kernel_blocks(t, ratio, arange).tolist()
                     for t in case.block_tables]
    q = random_queries((len(lens), 32, 128), torch.bfloat16, DEV, case.seed)
    out = paged_decode_attention(q, case.k_cache, case.v_cache, kernel_tables, lens,
                                 kernel_block_size=16)
    ref = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, lens)
    assert rel_error_per_seq_head(out, ref).max() < TOLERANCE[torch.bfloat16], f"{case.seed}"
    starts = [0, 1, 2, 18, 23]
    qp = random_queries((23, 32, 128), torch.bfloat16, DEV, case.seed)
    out = paged_prefill_attention(qp, case.k_cache, case.v_cache, kernel_tables, starts, lens,
                                  kernel_block_size=16)
    ref = ref_prefill_attention(qp, case.k_cache, case.v_cache, case.block_tables, starts, lens)
    token_seq = torch.tensor([0, 1] + [2] * 16 + [3] * 5)
    assert rel_error_per_seq_head(out, ref, token_seq).max() < TOLERANCE[torch.bfloat16]
