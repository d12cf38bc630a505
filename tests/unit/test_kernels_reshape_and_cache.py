"""CPU tests of reshape_and_cache (kernels/reshape_and_cache.py) under Triton's interpreter.

See tests/unit/test_kernels_decode_attention.py for why TRITON_INTERPRET is set only without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.reshape_and_cache import reshape_and_cache
from kernels.testing import fresh_seed


def _caches(num_blocks, block_size, heads, head_size, dtype=torch.float32):
    shape = (num_blocks, block_size, heads, head_size)
    return torch.full(shape, float("nan"), dtype=dtype), torch.full(
        shape, float("nan"), dtype=dtype
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_land_in_their_slots_and_padding_is_skipped(dtype):
    """Each token's K/V row lands at its slot; slot -1 rows write nothing; other slots stay NaN."""
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    k_cache, v_cache = _caches(6, 8, 2, 16, dtype)
    qkv = torch.randn((7, 3 * 2 * 16), generator=gen).to(dtype)
    key = qkv[:, 32:64].view(7, 2, 16)  # a strided slice, as out of a fused QKV projection
    value = qkv[:, 64:].view(7, 2, 16)
    slots = [3, -1, 17, 47, 0, -1, 40]
    reshape_and_cache(key, value, k_cache, v_cache, slots)
    for i, slot in enumerate(slots):
        if slot >= 0:
            assert torch.equal(k_cache[slot // 8, slot % 8], key[i]), f"seed {seed}"
            assert torch.equal(v_cache[slot // 8, slot % 8], value[i]), f"seed {seed}"
    written = (~k_cache.isnan()).all(dim=(2, 3)).sum().item()
    assert written == 5 and (~v_cache.isnan()).all(dim=(2, 3)).sum().item() == 5


def test_tile_smaller_than_row():
    """A row longer than one tile (tile_elements < heads * head_size) is copied in pieces."""
    k_cache, v_cache = _caches(2, 4, 4, 32)
    key = torch.randn((3, 4, 32))
    value = torch.randn((3, 4, 32))
    reshape_and_cache(key, value, k_cache, v_cache, torch.tensor([5, 0, 7]), tile_elements=32)
    assert torch.equal(k_cache[1, 1], key[0]) and torch.equal(v_cache[1, 3], value[2])
    assert torch.equal(k_cache[0, 0], key[1])


def test_rejects_mismatched_inputs():
    """Wrong row shape, dtype or slot count raises ValueError."""
    k_cache, v_cache = _caches(2, 4, 2, 16)
    with pytest.raises(ValueError, match="key"):
        reshape_and_cache(
            torch.zeros((3, 2, 8)), torch.zeros((3, 2, 16)), k_cache, v_cache, [0, 1, 2]
        )
    with pytest.raises(ValueError, match="slot_mapping"):
        reshape_and_cache(
            torch.zeros((3, 2, 16)), torch.zeros((3, 2, 16)), k_cache, v_cache, [0, 1]
        )
    with pytest.raises(ValueError, match="dtype"):
        reshape_and_cache(
            torch.zeros((1, 2, 16), dtype=torch.float16),
            torch.zeros((1, 2, 16)),
            k_cache,
            v_cache,
            [0],
        )
