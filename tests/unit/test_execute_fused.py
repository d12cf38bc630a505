"""The fused element-wise kernels (Triton interpreter) against torch."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.execute.fused import rms_norm, rope_cache, rotary, silu_and_mul

TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    err = (got.double() - want.double()).abs().max() / want.double().abs().max()
    assert err < TOL[dtype], float(err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm(dtype: torch.dtype) -> None:
    """With a residual: residual += x, out = norm(residual); without: out = norm(x)."""
    x, r, w = torch.randn(5, 48).to(dtype), torch.randn(5, 48).to(dtype), torch.rand(48) + 0.5
    w = w.to(dtype)
    total = x.double() + r.double()
    out = torch.full_like(x, float("nan"))
    rms_norm(x, w, 1e-6, out, residual=r)
    _close(r, total, dtype)
    _close(out, F.rms_norm(total, (48,), w.double(), 1e-6), dtype)
    rms_norm(x, w, 1e-6, out)
    _close(out, F.rms_norm(x.double(), (48,), w.double(), 1e-6), dtype)


def test_per_head_norm_of_a_strided_view() -> None:
    """Heads of a slice of a fused QKV row are normalised one by one into a contiguous out."""
    qkv = torch.randn(3, 6 * 16)
    q = qkv[:, 16:64].unflatten(1, (3, 16))
    out = torch.empty(3, 3, 16)
    w = torch.rand(16) + 0.5
    rms_norm(q, w, 1e-6, out)
    _close(out, F.rms_norm(q.double(), (16,), w.double(), 1e-6), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_in_place_on_qkv_slices(dtype: torch.dtype) -> None:
    qkv = torch.randn(4, (4 + 2 * 2) * 32).to(dtype)
    before = qkv.clone()
    q = qkv[:, :128].unflatten(1, (4, 32))
    k = qkv[:, 128:192].unflatten(1, (2, 32))
    pos = torch.tensor([0, 3, 17, 100])
    rotary(q, k, pos, rope_cache(10000.0, 32, 128, torch.device("cpu")))
    ang = pos.double()[:, None] / 10000.0 ** (torch.arange(0, 32, 2).double() / 32)
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]

    def rot(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., :16].double(), x[..., 16:].double()
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    _close(q, rot(before[:, :128].unflatten(1, (4, 32))), dtype)
    _close(k, rot(before[:, 128:192].unflatten(1, (2, 32))), dtype)
    assert torch.equal(qkv[:, 192:], before[:, 192:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_and_mul(dtype: torch.dtype) -> None:
    x = torch.randn(3, 2 * 1500).to(dtype)
    out = torch.full((3, 1500), float("nan"), dtype=dtype)
    silu_and_mul(x, out)
    _close(out, F.silu(x[:, :1500].double()) * x[:, 1500:].double(), dtype)


def test_shape_errors() -> None:
    with pytest.raises(ValueError, match="silu_and_mul"):
        silu_and_mul(torch.randn(2, 10), torch.empty(2, 4))
    with pytest.raises(ValueError, match="rotary"):
        rotary(torch.randn(2, 2, 16), torch.randn(3, 1, 16), torch.zeros(2, dtype=torch.long),
               rope_cache(1e4, 16, 8, torch.device("cpu")))
    with pytest.raises(ValueError, match="residual"):
        rms_norm(torch.randn(2, 3, 8), torch.ones(8), 1e-6, torch.empty(2, 3, 8),
                 residual=torch.randn(2, 8))
