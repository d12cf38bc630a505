"""CPU tests of V stored transposed per block (kernels/cache_layout.py) through every kernel.

Under the interpreter both layouts widen fp8 by the same cast and run the same tiles, so the
transposed layout must give bit-identical outputs, not merely outputs within the bound; the
float64 reference is checked as well. See tests/unit/test_kernels_decode_attention.py for why
TRITON_INTERPRET is set only without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.attention import paged_attention
from kernels.attention_plan import Shape, make_plan
from kernels.cache_layout import (
    V_TRANSPOSED_BY_DEFAULT,
    cache_rows,
    is_transposed_v,
    new_kv_cache,
    set_cache_rows,
    v_transposed_for,
    with_v_layout,
)
from kernels.copy_blocks import copy_blocks
from kernels.decode_attention import paged_decode_attention
from kernels.decode_config import DecodeConfig
from kernels.fp8 import FP8_DTYPE, quantize
from kernels.launch import kernel_block_view
from kernels.prefill_config import PrefillConfig
from kernels.reference import (
    Variant,
    ref_decode_attention,
    ref_prefill_attention,
    rel_error_per_seq_head,
)
from kernels.reshape_and_cache import reshape_and_cache
from kernels.testing import TOLERANCE, make_case, poisoned, random_queries

FP8_VAR = Variant(k_scale=0.02, v_scale=0.5)
BF16_BOUND = TOLERANCE[torch.bfloat16]


def _bytes(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8) if x.element_size() == 1 else x


def _fp8_case(lens, block_size, head_size=64):
    case = make_case(lens, 2, head_size, block_size, torch.bfloat16)
    k = quantize(case.k_cache * 0.1, FP8_VAR.k_scale)
    v = quantize(case.v_cache * 3, FP8_VAR.v_scale)
    return case, k, v


def test_layout_helpers():
    """V is allocated as asked ("auto": as V_TRANSPOSED_BY_DEFAULT says); rows read and written
    through either layout agree; a transposed V refuses smaller kernel blocks."""
    k, v = new_kv_cache(5, 16, 2, 32, FP8_DTYPE, v_layout="transposed")
    assert is_transposed_v(v) and not is_transposed_v(k) and v.shape == k.shape
    assert v.stride() == (16 * 2 * 32, 1, 32 * 16, 16)
    assert not is_transposed_v(new_kv_cache(5, 16, 2, 32, torch.bfloat16)[1])
    assert is_transposed_v(new_kv_cache(5, 16, 2, 32, torch.bfloat16, v_layout="transposed")[1])
    assert not is_transposed_v(new_kv_cache(5, 16, 2, 32, FP8_DTYPE, v_layout="token_major")[1])
    assert v_transposed_for(FP8_DTYPE) == (FP8_DTYPE in V_TRANSPOSED_BY_DEFAULT)
    assert not v_transposed_for(torch.float16) and v_transposed_for(FP8_DTYPE, "transposed")
    with pytest.raises(ValueError, match="v_layout 'hnd'"):
        v_transposed_for(FP8_DTYPE, "hnd")
    tm = torch.randn(5, 16, 2, 32).to(FP8_DTYPE)
    vt = with_v_layout(tm, "transposed")
    assert is_transposed_v(vt) and torch.equal(_bytes(vt), _bytes(tm))
    slots = torch.tensor([3, 17, 79, 40])
    assert torch.equal(_bytes(cache_rows(vt, slots)), _bytes(cache_rows(tm, slots)))
    rows = torch.randn(4, 2, 32).to(FP8_DTYPE)
    set_cache_rows(vt, slots, rows)
    assert torch.equal(_bytes(vt[1, 1]), _bytes(rows[1]))  # slot 17: block 1, offset 1
    with pytest.raises(ValueError, match="transposed per block cannot be read as smaller"):
        kernel_block_view(vt, 8)


@pytest.mark.parametrize(("block_size", "block_n", "window", "fp8"),
                         [(8, 16, None, True), (32, 16, None, False), (16, 16, 20, True)],
                         ids=["two-blocks-a-tile", "half-a-block-a-tile-bf16", "window"])
def test_decode_transposed_v_equals_token_major(block_size, block_n, window, fp8):
    """Decode split into several items: tiles of whole blocks, tiles inside one block (a bf16
    cache: the layout is not fp8's alone), and a window (ranges starting mid-block: V read
    element by element)."""
    lens = [5, 40, 77]
    case, k, v = _fp8_case(lens, block_size)
    var = Variant(k_scale=0.02, v_scale=0.5, window=window) if fp8 else Variant(window=window)
    if not fp8:
        k, v = case.k_cache, case.v_cache
    q = random_queries((3, 8, 64), torch.bfloat16, "cpu", case.seed)
    cfg = DecodeConfig(block_n=block_n, min_tokens_per_split=16)
    outs = []
    for v_cache in (v, with_v_layout(v, "transposed")):
        outs.append(poisoned(q))
        paged_decode_attention(q, k, v_cache, case.block_tables, lens, out=outs[-1], config=cfg,
                               k_scale=var.k_scale, v_scale=var.v_scale, sliding_window=window)
    assert torch.equal(outs[0], outs[1]), f"seed {case.seed}"
    ref = ref_decode_attention(q, k, v, case.block_tables, lens, variant=var)
    assert rel_error_per_seq_head(outs[1], ref).max() < BF16_BOUND, f"seed {case.seed}"


def test_plan_picks_the_transposed_read():
    """Block slices without a window, element reads with one; Triton's cast for fp8; the hand
    pipeline is replaced by the PTX table read."""
    def consts(window=None, transposed=True, pipeline="triton"):
        sh = Shape(4, 1, 0, 1, 4096, 32, 8, 128, 16, torch.bfloat16, FP8_DTYPE, window, None,
                   None, False, 0.1, 1.0, 1.0, 0, DecodeConfig(pipeline=pipeline), None, 132,
                   False, False, transposed)
        return make_plan(sh).constexprs
    assert consts()["V_T"] == 2 and consts(window=100)["V_T"] == 1
    assert consts(transposed=False)["V_T"] == 0
    assert consts()["FP8"] == 1 and consts(transposed=False)["FP8"] == 2
    assert consts(pipeline="prefetch")["PIPE"] == 1
    assert consts(pipeline="prefetch", transposed=False)["PIPE"] == 2


def test_mixed_launch_over_transposed_v():
    """Decodes, a speculative verification and prefill chunks in one launch (split-K items and
    query tiles) over an fp8 cache, block 32 under 16-token tiles: identical to the
    token-major V."""
    seqs = [(40, 1), (9, 1), (75, 3), (33, 20), (50, 17)]
    lens, starts = [c for c, _ in seqs], [0]
    for _, n in seqs:
        starts.append(starts[-1] + n)
    case = make_case(lens, 2, 32, 32, torch.bfloat16)
    k, v, var = quantize(case.k_cache * 0.1, 0.02), quantize(case.v_cache * 3, 0.5), FP8_VAR
    q = random_queries((starts[-1], 8, 32), torch.bfloat16, "cpu", case.seed)
    outs = []
    for v_cache in (v, with_v_layout(v, "transposed")):
        outs.append(poisoned(q))
        paged_attention(q, k, v_cache, case.block_tables, starts, lens, num_small_seqs=3,
                        small_query_len=3, out=outs[-1], k_scale=var.k_scale,
                        v_scale=var.v_scale,
                        prefill_config=PrefillConfig(block_m=16, block_n=16, num_warps=4,
                                                     num_stages=2),
                        decode_config=DecodeConfig(block_n=16, min_tokens_per_split=16))
    assert torch.equal(outs[0], outs[1]), f"seed {case.seed}"
    ref = ref_prefill_attention(q, k, v, case.block_tables, starts, lens, variant=var)
    token_seq = torch.repeat_interleave(torch.arange(len(seqs)), torch.tensor([n for _, n in seqs]))
    assert rel_error_per_seq_head(outs[1], ref, token_seq).max() < BF16_BOUND, f"{case.seed}"


def test_reshape_and_cache_and_copy_blocks_into_transposed_v():
    """Writes and block copies land at the same logical rows in both layouts, bit for bit."""
    gen = torch.Generator().manual_seed(0)
    key = torch.randn((20, 2, 32), generator=gen).to(torch.bfloat16)
    value = torch.randn((20, 2, 32), generator=gen).to(torch.bfloat16)
    slots = torch.randperm(6 * 16, generator=gen)[:20]
    pairs = []
    for layout in ("token_major", "transposed"):
        k, v = new_kv_cache(7, 16, 2, 32, FP8_DTYPE, v_layout=layout)
        k.view(torch.uint8).zero_()
        v.view(torch.uint8).zero_()
        reshape_and_cache(key, value, k, v, slots, k_scale=0.1, v_scale=0.2)
        copy_blocks(k, v, [(int(slots[0]) // 16, 6)])
        pairs.append((k, v))
    assert is_transposed_v(pairs[1][1]) and not is_transposed_v(pairs[0][1])
    assert torch.equal(_bytes(cache_rows(pairs[1][1], slots)), _bytes(quantize(value, 0.2)))
    for a, b in zip(pairs[0], pairs[1]):
        assert torch.equal(_bytes(a), _bytes(b))
