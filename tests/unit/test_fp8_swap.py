"""benchmarks/fp8_swap.py's experimental kernel against the float64 reference (interpreter)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernels.reference import rel_error_per_seq_head
from tests.benchkit import fp8_decode_case, load_benchmark


@pytest.mark.parametrize("group", [1, 4])
def test_swapped_fp8_decode_matches_the_reference(group: int) -> None:
    """Two sequences of 64 and 128 keys over a permuted fp8 cache: within bf16 output
    rounding of float64 over the dequantised values; a wrong scale is caught."""
    swap = load_benchmark("fp8_swap")
    c = fp8_decode_case(group)
    out = swap.swapped_decode(c["q"], c["k"], c["v"], c["tables"], c["ctx"], 0.05, 0.05,
                              torch.empty_like(c["q"]))
    assert float(rel_error_per_seq_head(out, c["ref"]).max()) < 8e-3
    bad = swap.swapped_decode(c["q"], c["k"], c["v"], c["tables"], c["ctx"], 0.07, 0.05,
                              torch.empty_like(c["q"]))
    assert float(rel_error_per_seq_head(bad, c["ref"]).max()) > 2e-2
