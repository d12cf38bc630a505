"""The fp8 (e4m3) cache rule (kernels/fp8.py) and its use by reshape_and_cache, on the CPU.

See tests/unit/test_kernels_decode_attention.py for why TRITON_INTERPRET is set only without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.fp8 import FP8_DTYPE, dequantize, inv_scale, quantize
from kernels.reshape_and_cache import reshape_and_cache
from kernels.testing import fresh_seed


def test_quantize_saturates_rounds_to_even_and_keeps_nan():
    """x / scale saturates at +-448, rounds to nearest even (subnormals too), NaN stays."""
    x = torch.tensor([1.0625, 17.0, 600.0, -600.0, 1.5 * 2**-10, 2**-11, float("nan"), 0.0])
    q = quantize(x).float()
    assert q[:6].tolist() == [1.0, 16.0, 448.0, -448.0, 2**-9, 0.0]
    assert q[6].isnan() and q[7] == 0
    assert dequantize(quantize(torch.tensor([3.0]), 0.5), 0.5).item() == 3.0
    with pytest.raises(ValueError, match="positive"):
        inv_scale(0.0)


def test_reshape_and_cache_quantises_bit_for_bit():
    """The kernel's quantisation (interpreted, rounded to nearest first) equals quantize()."""
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    k = torch.zeros((6, 4, 2, 32), dtype=FP8_DTYPE)
    v = torch.zeros_like(k)
    spread = torch.logspace(-6, 4, 32)
    key = (torch.randn((20, 2, 32), generator=gen) * spread).to(torch.bfloat16)
    key[0, 0, :4] = torch.tensor([1.0625, 17.0, -600.0, 1.5 * 2**-10]) * 0.37
    value = torch.randn((20, 2, 32), generator=gen, dtype=torch.float16)
    slots = torch.randperm(24, generator=gen)[:20]
    reshape_and_cache(key, value, k, v, slots, k_scale=0.37, v_scale=0.01)
    got = k.view(-1, 2, 32)[slots].view(torch.uint8)
    assert torch.equal(got, quantize(key, 0.37).view(torch.uint8)), f"seed {seed}"
    got = v.view(-1, 2, 32)[slots].view(torch.uint8)
    assert torch.equal(got, quantize(value, 0.01).view(torch.uint8)), f"seed {seed}"
