"""CPU tests of paged_attention (kernels/attention.py): mixed batches in one launch, plans.

See tests/unit/test_kernels_decode_attention.py for why TRITON_INTERPRET is set only without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.attention import paged_attention
from kernels.attention_plan import _PLANS
from kernels.decode_config import DecodeConfig
from kernels.prefill_config import PrefillConfig
from kernels.reference import ref_prefill_attention, rel_error_per_seq_head
from kernels.testing import TOLERANCE, make_case, poisoned, random_queries

SMALL = PrefillConfig(block_m=16, block_n=16, num_warps=4, num_stages=2)
SPLIT = DecodeConfig(block_n=16, min_tokens_per_split=16)
# Two decodes, a 3-token speculative verification, then two prefill chunks.
SEQS = [(40, 1), (9, 1), (75, 3), (33, 20), (50, 17)]


def _mixed(dtype, **kw):
    lens, starts = [c for c, _ in SEQS], [0]
    for _, n in SEQS:
        starts.append(starts[-1] + n)
    case = make_case(lens, 2, 32, 8, dtype)
    q = random_queries((starts[-1], 8, 32), dtype, "cpu", case.seed)
    out = poisoned(q)
    paged_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens,
                    num_small_seqs=3, small_query_len=3, prefill_config=SMALL, out=out, **kw)
    ref = ref_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, starts, lens)
    token_seq = torch.repeat_interleave(torch.arange(len(SEQS)), torch.tensor([n for _, n in SEQS]))
    return rel_error_per_seq_head(out, ref, token_seq), case


@pytest.mark.parametrize("fused", [True, False])
def test_mixed_batch_in_one_launch(fused):
    """Decodes, a short verification and prefill chunks together match the float64 reference."""
    err, case = _mixed(torch.bfloat16, decode_config=DecodeConfig(
        block_n=16, min_tokens_per_split=16, fused_reduce=fused))
    assert err.max() < TOLERANCE[torch.bfloat16], f"seed {case.seed}: {err}"


def test_plans_are_cached_per_shape():
    """A second call with the same shapes reuses the plan; new lengths in the same bucket too."""
    _mixed(torch.float32, decode_config=SPLIT)
    count = len(_PLANS)
    err, case = _mixed(torch.float32, decode_config=SPLIT)
    assert len(_PLANS) == count
    assert err.max() < 1e-5, f"seed {case.seed}"


def test_bad_arguments_name_the_field():
    """Sinks of the wrong shape, a too long small_query_len or a bad window raise ValueError."""
    case = make_case([4], 1, 16, 4, torch.float32)
    q = torch.zeros((1, 2, 16))
    args = (q, case.k_cache, case.v_cache, case.block_tables, [0, 1], [4])
    with pytest.raises(ValueError, match="sinks"):
        paged_attention(*args, sinks=torch.zeros(3))
    with pytest.raises(ValueError, match="small_query_len"):
        paged_attention(*args, num_small_seqs=1, small_query_len=99)
    with pytest.raises(ValueError, match="sliding_window"):
        paged_attention(*args, sliding_window=0)
