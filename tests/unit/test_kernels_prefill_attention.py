"""CPU tests of paged prefill/extend attention (kernels/prefill_attention.py), interpreted.

See tests/unit/test_kernels_decode_attention.py for why TRITON_INTERPRET is set only without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.prefill_attention import PrefillConfig, paged_prefill_attention
from kernels.reference import ref_prefill_attention, rel_error_per_seq_head, sdpa_prefill_attention
from kernels.testing import TOLERANCE, make_case, poisoned, random_queries

# (context, new tokens): pure prefill, a one-token extend, a chunk over a prefix ending
# mid-block, and a chunk spanning more than one query tile of the small configuration.
SEQS = [(9, 9), (30, 1), (29, 11), (60, 40)]
SMALL = PrefillConfig(block_m=16, block_n=16, num_warps=4, num_stages=2)


def _run(seqs, num_q_heads, num_kv_heads, head_size, block_size, dtype, config=None):
    lens = [c for c, _ in seqs]
    starts = [0]
    for _, n in seqs:
        starts.append(starts[-1] + n)
    case = make_case(lens, num_kv_heads, head_size, block_size, dtype)
    q = random_queries((starts[-1], num_q_heads, head_size), dtype, "cpu", case.seed)
    out = poisoned(q)
    paged_prefill_attention(
        q, case.k_cache, case.v_cache, case.block_tables, starts, lens, out=out, config=config
    )
    ref = ref_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens)
    token_seq = torch.repeat_interleave(torch.arange(len(seqs)), torch.tensor([n for _, n in seqs]))
    return out, ref, token_seq, q, case, starts


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_prefill_gqa_matches_float64_reference(dtype):
    """Extend attention with the default tiles matches the float64 token-walk reference."""
    out, ref, token_seq, _, case, _ = _run(SEQS, 4, 2, 64, 8, dtype)
    err = rel_error_per_seq_head(out, ref, token_seq)
    assert err.max() < TOLERANCE[dtype], f"seed {case.seed}: {err}"


def test_small_tiles_cross_tile_boundaries():
    """16x16 tiles put the causal diagonal inside and across tiles; results still match."""
    out, ref, token_seq, q, case, starts = _run(SEQS, 4, 2, 64, 16, torch.float32, SMALL)
    assert rel_error_per_seq_head(out, ref, token_seq).max() < 1e-5, f"seed {case.seed}"
    lens = [c for c, _ in SEQS]
    sdpa = sdpa_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens)
    assert rel_error_per_seq_head(sdpa, ref, token_seq).max() < 1e-5, f"seed {case.seed}"


def test_mqa_head_size_128_large_pages():
    """MQA at head size 128 with 64-token pages."""
    out, ref, token_seq, _, case, _ = _run([(70, 20), (5, 5)], 2, 1, 128, 64, torch.float32, SMALL)
    assert rel_error_per_seq_head(out, ref, token_seq).max() < 1e-5, f"seed {case.seed}"


def test_head_size_256_bf16():
    """Head size 256 in bf16 with its default tiles."""
    out, ref, token_seq, _, case, _ = _run([(20, 6)], 2, 1, 256, 8, torch.bfloat16)
    assert rel_error_per_seq_head(out, ref, token_seq).max() < TOLERANCE[torch.bfloat16], (
        f"seed {case.seed}"
    )


def test_causality_new_tokens_do_not_see_later_ones():
    """Changing a later new token's K/V leaves earlier queries' outputs unchanged."""
    out, _, _, q, case, starts = _run([(12, 6)], 2, 1, 64, 8, torch.float32, SMALL)
    table = case.block_tables[0]
    last = 11
    case.k_cache[table[last // 8], last % 8] += 5.0
    again = paged_prefill_attention(
        q, case.k_cache, case.v_cache, case.block_tables, starts, [12], config=SMALL
    )
    assert torch.equal(again[:5], out[:5])
    assert not torch.equal(again[5], out[5])


def test_wrapper_rejects_bad_arguments():
    """Inconsistent offsets or a wrong head size raise ValueError."""
    case = make_case([4], 2, 64, 8, torch.float32)
    q = torch.zeros((4, 4, 64))
    with pytest.raises(ValueError, match="start offsets"):
        paged_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, [0, 2, 4], [4])
    with pytest.raises(ValueError, match="q: expected"):
        paged_prefill_attention(
            torch.zeros((4, 4, 32)), case.k_cache, case.v_cache, case.block_tables, [0, 4], [4]
        )
    with pytest.raises(ValueError, match="power of two"):
        PrefillConfig(block_m=24)


@pytest.mark.parametrize("fused", [True, False])
def test_short_extends_run_as_split_k_items(fused):
    """At most 16 new tokens per sequence: the split-K path, forced to split, merged in-kernel
    or by the row-parallel merge launch, matches."""
    from kernels.decode_config import DecodeConfig

    seqs = [(70, 4), (33, 16), (9, 1)]
    lens, starts = [c for c, _ in seqs], [0, 4, 20, 21]
    case = make_case(lens, 2, 32, 8, torch.bfloat16)
    q = random_queries((21, 8, 32), torch.bfloat16, "cpu", case.seed)
    out = poisoned(q)
    paged_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens,
                            out=out, decode_config=DecodeConfig(
                                block_n=16, min_tokens_per_split=16, fused_reduce=fused))
    ref = ref_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens)
    token_seq = torch.tensor([0] * 4 + [1] * 16 + [2])
    err = rel_error_per_seq_head(out, ref, token_seq)
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err}"


@pytest.mark.parametrize("long_chunks", [True, False])
def test_variants_and_fp8_in_prefill(long_chunks):
    """Window, sinks, soft-cap over an fp8 cache, in query tiles and in split-K items."""
    from kernels.decode_config import DecodeConfig
    from kernels.fp8 import quantize
    from kernels.reference import Variant

    seqs = SEQS if long_chunks else [(30, 1), (29, 11), (60, 5)]
    lens = [c for c, _ in seqs]
    starts = [0]
    for _, n in seqs:
        starts.append(starts[-1] + n)
    var = Variant(soft_cap=2.0, sinks=torch.tensor([0.0, 1.0, -1.0, 3.0]), window=13,
                  k_scale=0.25, v_scale=2.0)
    case = make_case(lens, 2, 32, 8, torch.bfloat16)
    k, v = quantize(case.k_cache, 0.25), quantize(case.v_cache, 2.0)
    q = random_queries((starts[-1], 4, 32), torch.bfloat16, "cpu", case.seed)
    out = poisoned(q)
    paged_prefill_attention(q, k, v, case.block_tables, starts, lens, out=out, config=SMALL,
                            decode_config=DecodeConfig(block_n=16, min_tokens_per_split=16),
                            soft_cap=2.0, sinks=var.sinks, sliding_window=13, k_scale=0.25,
                            v_scale=2.0)
    ref = ref_prefill_attention(q, k, v, case.block_tables, starts, lens, variant=var)
    token_seq = torch.repeat_interleave(torch.arange(len(seqs)), torch.tensor([n for _, n in seqs]))
    err = rel_error_per_seq_head(out, ref, token_seq)
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err}"
