"""benchmarks/kernel_ab.py's head-major cache view: the shipped kernel reading an HND copy of
a cache gives the token-major cache's attention (CPU, Triton interpreter, tiny shapes).

See tests/unit/test_kernels_decode_attention.py for why TRITON_INTERPRET is set only without CUDA.
"""
from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.layer_timing import AttentionTimer, LayerShape
from kernels.reference import Variant, ref_decode_attention, rel_error_per_seq_head
from tests.benchkit import load_benchmark

SHAPE = LayerShape(num_q_heads=4, num_kv_heads=2, head_size=64, block_size=16,
                   dtype=torch.float32)


@pytest.mark.parametrize("kv", ["auto", "fp8"])
def test_head_major_view_attends_like_the_token_major_cache(kv: str) -> None:
    """Each block's tokens of one head are contiguous in the copy, and the decode over it
    matches the float64 reference over the original cache (fp8: its dequantised values)."""
    ab = load_benchmark("kernel_ab")
    t = AttentionTimer(SHAPE, 64, kv, device="cpu", seed=3)
    k, v = ab.head_major(t)
    heads = SHAPE.num_kv_heads
    assert k.shape == (64 * heads, SHAPE.block_size, 1, SHAPE.head_size)
    assert torch.equal(k[5 * heads + 1, :, 0], t.k[5, :, 1])  # block 5, head 1
    assert torch.equal(v[7 * heads, :, 0], t.v[7, :, 0])
    lens = [40, 17, 70]
    _, (q, tables, output) = ab.head_major_call(t, (k, v), lens)
    ref = ref_decode_attention(q, t.k, t.v, tables.tolist(), lens,
                               variant=Variant(k_scale=t.k_scale, v_scale=t.v_scale))
    tol = 1e-5 if kv == "auto" else 2e-3
    assert float(rel_error_per_seq_head(output(), ref).max()) < tol
