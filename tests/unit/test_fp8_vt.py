"""benchmarks/fp8_vt.py's experimental kernel against the float64 reference (interpreter)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernels.reference import rel_error_per_seq_head
from tests.benchkit import fp8_decode_case, load_benchmark


@pytest.mark.parametrize(("group", "mode"),
                         [(1, "vt_cast"), (4, "vt_asm"), (4, "tokmajor"), (4, "vt3_cast")])
def test_transposed_v_fp8_decode_matches_the_reference(group: int, mode: str) -> None:
    """Two sequences of 64 and 128 keys over a permuted fp8 cache, V token-major or stored
    transposed per block: within bf16 output rounding of float64 over the dequantised values;
    a wrong scale and an untransposed V are caught."""
    vt = load_benchmark("fp8_vt")
    c = fp8_decode_case(group)
    v = c["v"]
    v_in = v if mode == "tokmajor" else vt.transposed(v)

    def error(v_cache: torch.Tensor, k_scale: float) -> float:
        out = vt.vt_decode(c["q"], c["k"], v_cache, c["tables"], c["ctx"], k_scale, 0.05,
                           torch.empty_like(c["q"]), mode)
        return float(rel_error_per_seq_head(out, c["ref"]).max())

    assert error(v_in, 0.05) < 8e-3
    assert error(v_in, 0.07) > 2e-2
    if mode != "tokmajor":  # the token-major V read as if transposed gives other values
        assert error(v.view(v_in.shape), 0.05) > 2e-2
