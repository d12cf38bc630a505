"""CPU tests of paged decode attention (kernels/decode_attention.py, decode_config.py,
decode_reduce.py); its launch caches are tested in test_kernels_decode_cache.py.

The kernels run under Triton's interpreter for CPU tensors (kernels/launch.py picks the variant
per launch). TRITON_INTERPRET is set as well on CPU-only machines before triton is imported; on
a CUDA machine it is left alone, since it would turn Triton's own helpers into interpreted
functions for the whole process and break compiled GPU tests collected in the same run.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.decode_attention import paged_decode_attention
from kernels.decode_config import DecodeConfig, choose_num_splits, split_span
from kernels.reference import ref_decode_attention, rel_error_per_seq_head, sdpa_decode_attention
from kernels.testing import TOLERANCE, make_case, poisoned, random_queries

# Ragged: one token, a context ending mid-block, one exactly on a block boundary, several blocks.
LENS = [1, 7, 16, 37, 50]


def _run(lens, num_q_heads, num_kv_heads, head_size, block_size, dtype, **kwargs):
    case = make_case(lens, num_kv_heads, head_size, block_size, dtype)
    q = random_queries((len(lens), num_q_heads, head_size), dtype, "cpu", case.seed)
    out = poisoned(q)
    paged_decode_attention(
        q, case.k_cache, case.v_cache, case.block_tables, case.context_lens, out=out, **kwargs
    )
    window = kwargs.get("sliding_window")
    ref = ref_decode_attention(
        q, case.k_cache, case.v_cache, case.block_tables, lens, sliding_window=window
    )
    return out, ref, q, case


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_decode_gqa_matches_float64_reference(dtype):
    """GQA decode over ragged, shared and repeated pages matches the float64 reference."""
    out, ref, _, case = _run(LENS, 8, 2, 64, 8, dtype)
    err = rel_error_per_seq_head(out, ref)
    assert err.max() < TOLERANCE[dtype], f"seed {case.seed}: {err}"


def test_sdpa_reference_agrees_with_float64_reference():
    """torch SDPA on the contiguous cache agrees with the float64 reference in fp32."""
    out, ref, q, case = _run(LENS, 8, 2, 64, 8, torch.float32)
    sdpa = sdpa_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, LENS)
    assert rel_error_per_seq_head(sdpa, ref).max() < 1e-5, f"seed {case.seed}"
    assert rel_error_per_seq_head(out, sdpa.double()).max() < 1e-5, f"seed {case.seed}"


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("num_splits", [2, 5])
def test_split_k_matches_reference(num_splits, fused):
    """Forced split-K, merged in-kernel or by the reduction kernel, matches; empty splits too."""
    cfg = DecodeConfig(block_n=16, fused_reduce=fused)
    out, ref, _, case = _run(LENS, 4, 2, 64, 16, torch.float32, num_splits=num_splits, config=cfg)
    assert rel_error_per_seq_head(out, ref).max() < 1e-5, f"seed {case.seed}"


@pytest.mark.parametrize("fused", [True, False])
def test_split_k_bf16_and_counters_reset(fused):
    """bf16 split-K meets its bound, and a second call on the same inputs gives identical output."""
    cfg = DecodeConfig(block_n=16, fused_reduce=fused)
    out, ref, q, case = _run(LENS, 8, 2, 64, 8, torch.bfloat16, num_splits=3, config=cfg)
    assert rel_error_per_seq_head(out, ref).max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}"
    again = paged_decode_attention(
        q, case.k_cache, case.v_cache, case.block_tables, LENS, num_splits=3, config=cfg
    )
    assert torch.equal(again, out)


def test_mqa_with_head_size_128():
    """MQA (one KV head for all query heads) at head size 128 and block size 32."""
    out, ref, _, case = _run([3, 40, 65], 4, 1, 128, 32, torch.float32)
    assert rel_error_per_seq_head(out, ref).max() < 1e-5, f"seed {case.seed}"


def test_head_size_256_bf16():
    """Head size 256 in bf16 (the smallest tile configuration)."""
    out, ref, _, case = _run([5, 20], 2, 1, 256, 16, torch.bfloat16)
    assert rel_error_per_seq_head(out, ref).max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}"


@pytest.mark.parametrize("block_size", [64, 128])
def test_large_pages(block_size):
    """Pages larger than the token tile: several tiles read one page."""
    out, ref, _, case = _run([5, 150], 2, 1, 64, block_size, torch.float32)
    assert rel_error_per_seq_head(out, ref).max() < 1e-5, f"seed {case.seed}"


@pytest.mark.parametrize("num_splits", [1, 3])
def test_sliding_window(num_splits):
    """With a sliding window only the last `window` tokens count, split or not."""
    out, ref, _, case = _run(
        LENS,
        4,
        2,
        64,
        8,
        torch.float32,
        sliding_window=9,
        num_splits=num_splits,
        config=DecodeConfig(block_n=16),
    )
    assert rel_error_per_seq_head(out, ref).max() < 1e-5, f"seed {case.seed}"
    q = random_queries((len(LENS), 4, 64), torch.float32, "cpu", case.seed)
    full = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, LENS)
    assert (full[-1] - ref[-1]).abs().max() > 1e-3, (
        "window made no difference on a 50-token context"
    )


def test_tensor_block_tables_and_lengths():
    """int32 tensors for tables and lengths give the same result as Python lists."""
    case = make_case([9, 30], 2, 64, 8, torch.float32)
    q = random_queries((2, 4, 64), torch.float32, "cpu", case.seed)
    width = max(len(t) for t in case.block_tables)
    tables = torch.tensor(
        [t + [0] * (width - len(t)) for t in case.block_tables], dtype=torch.int32
    )
    a = paged_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, case.context_lens)
    b = paged_decode_attention(
        q, case.k_cache, case.v_cache, tables, torch.tensor([9, 30], dtype=torch.int32)
    )
    assert torch.equal(a, b)


def test_wrapper_rejects_bad_arguments():
    """Mismatched heads, dtypes or counts raise ValueError before any launch."""
    case = make_case([4], 2, 64, 8, torch.float32)
    q = torch.zeros((1, 3, 64))
    with pytest.raises(ValueError, match="q: expected"):
        paged_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, [4])
    with pytest.raises(ValueError, match="dtype"):
        paged_decode_attention(
            torch.zeros((1, 4, 64), dtype=torch.float16),
            case.k_cache,
            case.v_cache,
            case.block_tables,
            [4],
        )
    with pytest.raises(ValueError, match="tables"):
        paged_decode_attention(
            torch.zeros((2, 4, 64)), case.k_cache, case.v_cache, case.block_tables, [4, 4]
        )
    with pytest.raises(ValueError, match="out: expected .* on cpu"):
        paged_decode_attention(torch.zeros((1, 4, 64)), case.k_cache, case.v_cache,
                               case.block_tables, [4], out=torch.empty((1, 4, 64), device="meta"))


def test_split_heuristic():
    """Uniform batches: about 3 items per SM, none below 256 tokens."""
    assert choose_num_splits(64, 8, 4096, 64, 132) == 1
    assert choose_num_splits(1, 8, 4096, 64, 132) == 16
    assert choose_num_splits(8, 8, 4096, 64, 132) == 6
    assert choose_num_splits(32, 8, 4096, 64, 132) == 2
    assert choose_num_splits(16, 8, 16384, 64, 132) == 4
    assert choose_num_splits(256, 8, 1024, 64, 132) == 1
    assert choose_num_splits(1, 8, 700, 64, 132) == 2
    assert choose_num_splits(1, 8, 500, 64, 132) == 1
    assert split_span(5000, 1024) == 1024 and split_span(100, None) == 100


RAGGED_CFG = DecodeConfig(block_n=16, min_tokens_per_split=16, ragged_programs_per_sm=8)


def test_ragged_batch_split_by_tokens():
    """A ragged batch cut into many short items (merged in-kernel) matches the reference."""
    out, ref, _, case = _run([3, 150, 9, 64, 1], 8, 2, 64, 8, torch.bfloat16, config=RAGGED_CFG)
    assert rel_error_per_seq_head(out, ref).max() < TOLERANCE[torch.bfloat16], f"{case.seed}"


def test_fp8_cache_matches_dequantised_reference():
    """An e4m3 cache with per-tensor scales, bf16 queries, split: float64 over dequantised."""
    from kernels.fp8 import quantize
    from kernels.reference import Variant

    lens = [5, 40, 77]
    case = make_case(lens, 2, 64, 8, torch.bfloat16)
    k, v = quantize(case.k_cache * 0.1, 0.02), quantize(case.v_cache * 3, 0.5)
    q = random_queries((3, 8, 64), torch.bfloat16, "cpu", case.seed)
    out = poisoned(q)
    paged_decode_attention(q, k, v, case.block_tables, lens, out=out, k_scale=0.02, v_scale=0.5,
                           config=RAGGED_CFG)
    ref = ref_decode_attention(q, k, v, case.block_tables, lens,
                               variant=Variant(k_scale=0.02, v_scale=0.5))
    assert rel_error_per_seq_head(out, ref).max() < TOLERANCE[torch.bfloat16], f"{case.seed}"
    wrong = ref_decode_attention(q, k, v, case.block_tables, lens)
    assert rel_error_per_seq_head(out, wrong).max() > 0.1, "scales made no difference"


@pytest.mark.parametrize("num_splits", [None, 3])
def test_model_variants(num_splits):
    """Soft-capping, sinks and chunked local attention together, split or not."""
    from kernels.reference import Variant

    var = Variant(soft_cap=1.5, sinks=torch.tensor([-1.0, 0.5, 2.0, 4.0]), chunk=24)
    case = make_case(LENS, 2, 64, 8, torch.float32)
    q = random_queries((len(LENS), 4, 64), torch.float32, "cpu", case.seed) * 3
    kw = {"soft_cap": var.soft_cap, "sinks": var.sinks, "attention_chunk_size": var.chunk}
    out = paged_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, LENS,
                                 num_splits=num_splits, config=DecodeConfig(block_n=16), **kw)
    ref = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, LENS,
                               variant=var)
    assert rel_error_per_seq_head(out, ref).max() < 1e-5, f"seed {case.seed}"
    plain = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, LENS)
    assert rel_error_per_seq_head(out, plain).max() > 1e-2, "variants made no difference"


def test_kernel_blocks_under_manager_blocks():
    """Kernel blocks of 8 under manager blocks of 16 / 32, ids from BlockTable's mapping rule."""
    from allocator.block_table import BlockTable

    for manager in (16, 32):
        case = make_case([5, 70, 33], 2, 64, manager, torch.float32)
        ratio = manager // 8
        tables = [BlockTable.map_to_kernel_blocks(t, ratio, range(ratio)).tolist()
                  for t in case.block_tables]
        q = random_queries((3, 4, 64), torch.float32, "cpu", case.seed)
        out = paged_decode_attention(q, case.k_cache, case.v_cache, tables, [5, 70, 33],
                                     kernel_block_size=8)
        ref = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, [5, 70, 33])
        assert rel_error_per_seq_head(out, ref).max() < 1e-5, f"seed {case.seed}"
    with pytest.raises(ValueError, match="kernel_block_size"):
        paged_decode_attention(q, case.k_cache, case.v_cache, tables, [5, 70, 33],
                               kernel_block_size=12)


def test_table_entries_beyond_the_context_are_never_read():
    """Tensor tables padded with other sequences' live blocks give the same output."""
    lens = [9, 40]
    case = make_case(lens, 2, 64, 8, torch.float32)
    q = random_queries((2, 4, 64), torch.float32, "cpu", case.seed)
    live = case.block_tables[1] * 2
    tables = torch.tensor([(t + live)[:8] for t in case.block_tables], dtype=torch.int32)
    out = paged_decode_attention(q, case.k_cache, case.v_cache, tables, lens)
    ref = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, lens)
    assert rel_error_per_seq_head(out, ref).max() < 1e-5, f"seed {case.seed}"


def test_fp8_widen_option_reaches_the_kernel():
    """fp8_widen picks the kernel's FP8 constant on the GPU; the interpreter always casts."""
    from kernels.attention_plan import Shape, make_plan
    from kernels.decode_config import FP8_WIDEN

    with pytest.raises(ValueError, match="fp8_widen"):
        DecodeConfig(fp8_widen="bits")

    def fp8_const(kv_dtype, cfg, interpret):
        sh = Shape(4, 1, 0, 1, 4096, 32, 8, 128, 16, torch.bfloat16, kv_dtype, None, None,
                   None, False, 0.1, 1.0, 1.0, 0, cfg, None, 132, interpret, False)
        return make_plan(sh).constexprs["FP8"]

    fp8 = torch.float8_e4m3fn
    for name, value in FP8_WIDEN.items():
        assert fp8_const(fp8, DecodeConfig(fp8_widen=name), False) == value
        assert fp8_const(fp8, DecodeConfig(fp8_widen=name), True) == 1
    assert fp8_const(torch.bfloat16, DecodeConfig(fp8_widen="asm"), False) == 0
    assert fp8_const(fp8, None, False) == FP8_WIDEN[DecodeConfig().fp8_widen]


@pytest.mark.parametrize("kw", [{}, {"num_splits": 3}, {"sliding_window": 40}])
def test_hand_prefetched_tiles(kw):
    """pipeline="prefetch" (next tile loaded ahead by hand; empty, one-tile and long unmasked
    ranges) matches the reference; table_asm falls back to plain loads here."""
    for pipeline in ("prefetch", "table_asm"):
        cfg = DecodeConfig(block_n=16, num_warps=2, num_stages=1, pipeline=pipeline)
        out, ref, _, case = _run([1, 17, 33, 64, 150], 8, 2, 32, 16, torch.bfloat16, config=cfg,
                                 **kw)
        err = rel_error_per_seq_head(out, ref).max()
        assert err < TOLERANCE[torch.bfloat16], f"{pipeline} seed {case.seed}: {err:.3e}"


def test_pipeline_option_reaches_the_kernel():
    """pipeline picks the kernel's PIPE constant; the interpreter cannot run table_asm's PTX."""
    from kernels.attention_plan import Shape, make_plan
    from kernels.decode_config import PIPELINES

    with pytest.raises(ValueError, match="pipeline"):
        DecodeConfig(pipeline="double")
    for name, value in PIPELINES.items():
        for interpret in (False, True):
            sh = Shape(4, 1, 0, 1, 4096, 32, 8, 128, 16, torch.bfloat16, torch.bfloat16, None,
                       None, None, False, 0.1, 1.0, 1.0, 0, DecodeConfig(pipeline=name), None,
                       132, interpret, False)
            want = 0 if interpret and name == "table_asm" else value
            assert make_plan(sh).constexprs["PIPE"] == want


def _plan(num_large, cfg, interpret=False, kv_dtype=torch.bfloat16):
    from kernels.attention_plan import Shape, make_plan

    sh = Shape(4, 1, num_large, 512 if num_large else 1, 4096, 32, 8, 128, 16, torch.bfloat16,
               kv_dtype, None, None, None, False, 0.1, 1.0, 1.0, 0, cfg, None, 132, interpret,
               bool(num_large))
    return make_plan(sh)


def test_mixed_launches_read_the_table_through_ptx():
    """Decode items in a launch with query tiles take the PTX table (compiled only); alone
    they keep Triton's pipelining (bf16) or the fp8 configuration's PTX table."""
    from kernels.decode_config import PIPELINES

    assert _plan(2, None).constexprs["PIPE"] == PIPELINES["table_asm"]
    assert _plan(0, None).constexprs["PIPE"] == PIPELINES["triton"]
    assert _plan(2, None, interpret=True).constexprs["PIPE"] == 0
    assert _plan(0, None, kv_dtype=torch.float8_e4m3fn).constexprs["PIPE"] == PIPELINES[
        "table_asm"]
    assert _plan(2, DecodeConfig()).constexprs["PIPE"] == PIPELINES["triton"]  # as given


def test_maxnreg_reaches_decode_only_gpu_launches():
    """maxnreg becomes a launch option of compiled decode-only launches, nothing else."""
    cfg = DecodeConfig(maxnreg=128)
    assert _plan(0, cfg).launch == {"num_warps": 4, "num_stages": 2, "maxnreg": 128}
    assert "maxnreg" not in _plan(0, cfg, interpret=True).launch
    assert "maxnreg" not in _plan(2, cfg).launch
    assert "maxnreg" not in _plan(0, DecodeConfig()).launch
    assert "MAXNREG" not in _plan(0, cfg).constexprs
