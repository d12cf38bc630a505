"""GPU tests of the paged kernels at real sizes against the torch references (skipped without CUDA).

Llama-3-8B-like shapes (32 query / 8 KV heads, head size 128, block size 16) plus the other
supported head sizes, block sizes, dtypes, MQA, sliding windows and forced split-K. Tolerances
are kernels.testing.TOLERANCE, justified there; inputs come from a fresh, printed seed.
"""

from __future__ import annotations

import pytest
import torch

from kernels.copy_blocks import copy_blocks
from kernels.decode_attention import paged_decode_attention
from kernels.decode_config import DecodeConfig
from kernels.prefill_attention import paged_prefill_attention
from kernels.reference import (
    ref_decode_attention,
    ref_prefill_attention,
    rel_error_per_seq_head,
    sdpa_decode_attention,
)
from kernels.reshape_and_cache import reshape_and_cache
from kernels.slot_mapping import compute_slot_mapping
from kernels.swap import allocate_cpu_cache, swap_kv
from kernels.testing import TOLERANCE, fresh_seed, make_case, poisoned, random_queries

pytestmark = pytest.mark.gpu
DEV = "cuda"
RAGGED = [1, 15, 16, 17, 1000, 2047, 4096, 3001]


def _decode(lens, hq, hkv, d, bs, dtype, **kw):
    case = make_case(lens, hkv, d, bs, dtype, DEV)
    q = random_queries((len(lens), hq, d), dtype, DEV, case.seed)
    out = poisoned(q)
    paged_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, lens, out=out, **kw)
    ref = ref_decode_attention(
        q,
        case.k_cache,
        case.v_cache,
        case.block_tables,
        lens,
        sliding_window=kw.get("sliding_window"),
    )
    return rel_error_per_seq_head(out, ref), case, q


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_decode_llama3_shapes(dtype):
    """Llama-3-8B decode over ragged contexts (mid-block ends, shared pages) in every dtype."""
    err, case, _ = _decode(RAGGED, 32, 8, 128, 16, dtype)
    assert err.max() < TOLERANCE[dtype], f"seed {case.seed}: max {err.max():.3e}"


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("num_splits", [None, 1, 7, 32])
def test_decode_split_k_small_batch(num_splits, fused):
    """Small batches of long contexts: any split count, merged in-kernel or by a second kernel."""
    cfg = DecodeConfig(fused_reduce=fused)
    err, case, q = _decode(
        [4096, 2500], 32, 8, 128, 16, torch.bfloat16, num_splits=num_splits, config=cfg
    )
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}"
    out = paged_decode_attention(
        q,
        case.k_cache,
        case.v_cache,
        case.block_tables,
        [4096, 2500],
        num_splits=num_splits,
        config=cfg,
    )
    again = paged_decode_attention(
        q,
        case.k_cache,
        case.v_cache,
        case.block_tables,
        [4096, 2500],
        num_splits=num_splits,
        config=cfg,
    )
    assert torch.equal(out, again), "split-K merge is not deterministic"


@pytest.mark.parametrize(
    "head_size,block_size", [(64, 8), (128, 32), (256, 64), (256, 128), (64, 128)]
)
def test_decode_head_and_block_sizes(head_size, block_size):
    """Head sizes 64/128/256 with block sizes 8..128 in bf16."""
    err, case, _ = _decode([33, 700, 1500], 8, 2, head_size, block_size, torch.bfloat16)
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}"


def test_decode_fp32_head_256_mqa_ieee():
    """fp32 at head size 256 with MQA reaches the IEEE bound (no TF32 anywhere)."""
    err, case, _ = _decode([100, 1200], 16, 1, 256, 16, torch.float32)
    assert err.max() < 1e-5, f"seed {case.seed}: {err.max():.3e}"


@pytest.mark.parametrize("num_splits", [None, 4])
def test_decode_sliding_window(num_splits):
    """Sliding window 1000 over contexts shorter and longer than the window."""
    err, case, _ = _decode(
        [500, 1000, 1001, 3000],
        32,
        8,
        128,
        16,
        torch.bfloat16,
        sliding_window=1000,
        num_splits=num_splits,
    )
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}"


def test_decode_matches_sdpa_on_contiguous_cache():
    """The kernel and SDPA(enable_gqa) on the contiguous cache agree in fp32."""
    _, case, q = _decode([300, 2049], 32, 8, 128, 16, torch.float32)
    out = paged_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, [300, 2049])
    sdpa = sdpa_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, [300, 2049])
    assert rel_error_per_seq_head(out, sdpa).max() < 1e-4, f"seed {case.seed}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_prefill_extend_llama3_shapes(dtype):
    """Chunked prefill over cached prefixes: pure prefill, tiny and long chunks, mid-block ends."""
    seqs = [(700, 700), (2048 + 517, 517), (1500, 1), (4000, 1000)]
    lens = [c for c, _ in seqs]
    starts = [0]
    for _, n in seqs:
        starts.append(starts[-1] + n)
    case = make_case(lens, 8, 128, 16, dtype, DEV)
    q = random_queries((starts[-1], 32, 128), dtype, DEV, case.seed)
    out = poisoned(q)
    paged_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens, out=out)
    ref = ref_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens)
    token_seq = torch.repeat_interleave(torch.arange(len(seqs)), torch.tensor([n for _, n in seqs]))
    err = rel_error_per_seq_head(out, ref, token_seq)
    assert err.max() < TOLERANCE[dtype], f"seed {case.seed}: {err.max():.3e}"


@pytest.mark.parametrize(
    "head_size,block_size,dtype",
    [(64, 8, torch.bfloat16), (256, 32, torch.bfloat16), (256, 16, torch.float32)],
)
def test_prefill_other_head_sizes(head_size, block_size, dtype):
    """Prefill at head sizes 64 and 256 with small and large pages, bf16 and IEEE fp32."""
    seqs = [(300, 100), (90, 90)]
    case = make_case([300, 90], 2, head_size, block_size, dtype, DEV)
    q = random_queries((190, 8, head_size), dtype, DEV, case.seed)
    out = poisoned(q)
    args = (case.k_cache, case.v_cache, case.block_tables, [0, 100, 190], [300, 90])
    paged_prefill_attention(q, *args, out=out)
    ref = ref_prefill_attention(q, *args)
    token_seq = torch.repeat_interleave(torch.arange(2), torch.tensor([n for _, n in seqs]))
    err = rel_error_per_seq_head(out, ref, token_seq)
    assert err.max() < TOLERANCE[dtype], f"seed {case.seed}: {err.max():.3e}"


def test_slot_mapping_then_reshape_and_cache():
    """Slots computed on device route new rows through reshape_and_cache to the right rows."""
    seed = fresh_seed()
    lens = [17, 40, 1]
    case = make_case(lens, 8, 128, 16, torch.bfloat16, DEV, seed=seed)
    starts = [0, 1, 2, 3]
    slots = compute_slot_mapping(case.block_tables, starts, lens, 16, num_tokens=5, device=DEV)
    gen = torch.Generator(device=DEV).manual_seed(seed)
    key = torch.randn((5, 8, 128), generator=gen, device=DEV).to(torch.bfloat16)
    value = torch.randn((5, 8, 128), generator=gen, device=DEV).to(torch.bfloat16)
    reshape_and_cache(key, value, case.k_cache, case.v_cache, slots)
    for i, n in enumerate(lens):
        pos = n - 1
        blk = case.block_tables[i][pos // 16]
        assert torch.equal(case.k_cache[blk, pos % 16], key[i]), f"seed {seed}"
        assert torch.equal(case.v_cache[blk, pos % 16], value[i]), f"seed {seed}"
    assert slots[3:].tolist() == [-1, -1]


def test_big_reshape_and_copy_blocks_and_swap():
    """Large scatter, a 1000-pair copy plan and a GPU->CPU->GPU swap move exact bytes."""
    seed = fresh_seed()
    gen = torch.Generator(device=DEV).manual_seed(seed)
    k = torch.randn((4096, 16, 8, 128), generator=gen, device=DEV).to(torch.bfloat16)
    v = torch.randn((4096, 16, 8, 128), generator=gen, device=DEV).to(torch.bfloat16)
    perm = torch.randperm(4096 * 16, generator=gen, device=DEV)[:20000]
    key = torch.randn((20000, 8, 128), generator=gen, device=DEV).to(torch.bfloat16)
    reshape_and_cache(key, key, k, v, perm)
    assert torch.equal(k.view(-1, 8, 128)[perm], key) and torch.equal(v.view(-1, 8, 128)[perm], key)
    ids = torch.randperm(4096, generator=gen, device=DEV)
    plan = torch.stack([ids[:1000], ids[1000:2000]], dim=1)
    k0 = k.clone()
    copy_blocks(k, v, plan)
    assert torch.equal(k[ids[1000:2000]], k0[ids[:1000]]) and torch.equal(
        k[ids[2000:]], k0[ids[2000:]]
    )
    ck, cv = allocate_cpu_cache(k, 64), allocate_cpu_cache(v, 64)
    swap_kv((k, v), (ck, cv), [(int(b), i) for i, b in enumerate(ids[:64])])
    swap_kv((ck, cv), (k, v), [(i, int(b)) for i, b in enumerate(ids[64:128])])
    assert torch.equal(k[ids[64:128]], k0[ids[:64]]) and torch.equal(v[ids[64:128]], cv.to(DEV))


# Ragged work split: long and short contexts in one batch, so the batch is cut into items by
# tokens (kernels/split_k.py); GQA groups 1/2/4/8, head sizes 64/128/256, block sizes 8-64.
RAGGED_LONG = [1, 17, 300, 4096, 9000, 20000, 2, 511, 513]


@pytest.mark.parametrize(
    "hq,hkv,head_size,block_size",
    [(8, 8, 128, 16), (16, 8, 64, 8), (32, 8, 128, 32), (16, 2, 256, 64)],
)
def test_decode_ragged_work_split(hq, hkv, head_size, block_size):
    """Ragged batches with items of equal length: every (group, head, page) combination."""
    err, case, _ = _decode(RAGGED_LONG, hq, hkv, head_size, block_size, torch.bfloat16)
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err.max():.3e}"


@pytest.mark.parametrize("cfg", [DecodeConfig(ragged_programs_per_sm=48),
                                 DecodeConfig(min_tokens_per_split=64, block_n=32),
                                 DecodeConfig(fused_reduce=False, ragged_programs_per_sm=24)])
def test_decode_ragged_many_items(cfg):
    """Many short items per sequence (up to the 64-item cap), merged in-kernel or separately."""
    err, case, _ = _decode(RAGGED_LONG, 32, 8, 128, 16, torch.bfloat16, config=cfg)
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err.max():.3e}"


def test_decode_garbage_beyond_table_end():
    """Table entries past each context name other sequences' live blocks: never read."""
    lens = [100, 3000, 17, 4096]
    case = make_case(lens, 8, 128, 16, torch.bfloat16, DEV)
    q = random_queries((len(lens), 32, 128), torch.bfloat16, DEV, case.seed)
    width = max(len(t) for t in case.block_tables) + 3
    live = [b for t in case.block_tables for b in t]
    gen = torch.Generator().manual_seed(case.seed)
    pad = torch.tensor(live)[torch.randint(len(live), (len(lens), width), generator=gen)]
    for i, t in enumerate(case.block_tables):
        pad[i, : len(t)] = torch.tensor(t)
    tables = pad.to(torch.int32).to(DEV)
    out = paged_decode_attention(q, case.k_cache, case.v_cache, tables, lens)
    ref = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, lens)
    assert rel_error_per_seq_head(out, ref).max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}"


def test_decode_matches_previous_kernel():
    """The work-split kernel and the previous one agree on a ragged batch (both vs float64)."""
    from kernels.decode_v1 import paged_decode_attention_v1

    err, case, q = _decode(RAGGED, 32, 8, 128, 16, torch.bfloat16)
    old = paged_decode_attention_v1(q, case.k_cache, case.v_cache, case.block_tables, RAGGED)
    ref = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, RAGGED)
    assert rel_error_per_seq_head(old, ref).max() < TOLERANCE[torch.bfloat16]
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}"


def _prefill_case(seqs, hq=32, hkv=8, d=128, bs=16, dtype=torch.bfloat16):
    lens = [c for c, _ in seqs]
    starts = [0]
    for _, n in seqs:
        starts.append(starts[-1] + n)
    case = make_case(lens, hkv, d, bs, dtype, DEV)
    q = random_queries((starts[-1], hq, d), dtype, DEV, case.seed)
    token_seq = torch.repeat_interleave(torch.arange(len(seqs)), torch.tensor([n for _, n in seqs]))
    return case, q, starts, lens, token_seq


@pytest.mark.parametrize("num_seqs,new", [(1, 16), (16, 16), (5, 4), (3, 9)])
def test_extend_short_over_long_prefix(num_seqs, new):
    """A few new tokens over long cached prefixes (prefix hit tails, speculative verification)."""
    seqs = [(5000 + 37 * i + new, new) for i in range(num_seqs)]
    case, q, starts, lens, token_seq = _prefill_case(seqs)
    out = poisoned(q)
    paged_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens, out=out)
    ref = ref_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens)
    err = rel_error_per_seq_head(out, ref, token_seq)
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err.max():.3e}"


def test_mixed_batch_one_launch():
    """Decodes, a short extend and prefill chunks in one launch match the float64 reference."""
    from kernels.attention import paged_attention

    seqs = [(4000, 1), (17, 1), (1200, 1), (9000, 4), (700, 700), (2048 + 300, 300)]
    case, q, starts, lens, token_seq = _prefill_case(seqs)
    out = poisoned(q)
    paged_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens,
                    num_small_seqs=4, small_query_len=4, out=out)
    ref = ref_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens)
    err = rel_error_per_seq_head(out, ref, token_seq)
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err.max():.3e}"
