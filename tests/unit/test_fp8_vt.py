"""benchmarks/fp8_vt.py's experimental kernel against the float64 reference (interpreter)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernels.fp8 import quantize
from kernels.reference import Variant, ref_decode_attention, rel_error_per_seq_head
from tests.benchkit import load_benchmark


@pytest.mark.parametrize(("group", "mode"), [(1, "vt_cast"), (4, "vt_asm"), (4, "tokmajor"), (4, "vt3_cast")])
def test_transposed_v_fp8_decode_matches_the_reference(group: int, mode: str) -> None:
    """Two sequences of 64 and 128 keys over a permuted fp8 cache, V token-major or stored
    transposed per block: within bf16 output rounding of float64 over the dequantised values;
    a wrong scale and an untransposed V are caught."""
    vt = load_benchmark("fp8_vt")
    gen = torch.Generator().manual_seed(group)
    kv_heads, head, block = 2, 16, 8
    k = quantize(torch.randn(40, block, kv_heads, head, generator=gen), 0.05)
    v = quantize(torch.randn(40, block, kv_heads, head, generator=gen), 0.05)
    q = torch.randn(2, kv_heads * group, head, generator=gen).to(torch.bfloat16)
    perm = (torch.randperm(39, generator=gen) + 1).to(torch.int32)
    tables = torch.stack([perm[:16], perm[16:32]])
    lens = [64, 128]
    ref = ref_decode_attention(q, k, v, tables.tolist(), lens,
                               variant=Variant(k_scale=0.05, v_scale=0.05))
    ctx = torch.tensor(lens, dtype=torch.int32)
    v_in = v if mode == "tokmajor" else vt.transposed(v)
    out = vt.vt_decode(q, k, v_in, tables, ctx, 0.05, 0.05, torch.empty_like(q), mode)
    assert float(rel_error_per_seq_head(out, ref).max()) < 8e-3
    bad = vt.vt_decode(q, k, v_in, tables, ctx, 0.07, 0.05, torch.empty_like(q), mode)
    assert float(rel_error_per_seq_head(bad, ref).max()) > 2e-2
    if mode != "tokmajor":  # the token-major V read as if transposed gives other values
        wrong = vt.vt_decode(q, k, v.view(v_in.shape), tables, ctx, 0.05, 0.05,
                             torch.empty_like(q), mode)
        assert float(rel_error_per_seq_head(wrong, ref).max()) > 2e-2
