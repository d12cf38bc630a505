"""CPU tests of copy_blocks (kernels/copy_blocks.py) under Triton's interpreter.

See tests/unit/test_kernels_decode_attention.py for why TRITON_INTERPRET is set only without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.copy_blocks import copy_blocks
from kernels.testing import fresh_seed


def _caches(seed, num_blocks=10, block_size=8, heads=2, head_size=16):
    gen = torch.Generator().manual_seed(seed)
    shape = (num_blocks, block_size, heads, head_size)
    return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)


@pytest.mark.parametrize("chunk", [8192, 64])
def test_copy_plan_copies_whole_blocks_and_nothing_else(chunk):
    """Each (src, dst) pair copies the whole block in K and V; untouched blocks keep their data."""
    seed = fresh_seed()
    k, v = _caches(seed)
    k0, v0 = k.clone(), v.clone()
    plan = [(1, 5), (1, 6), (3, 2)]
    copy_blocks(k, v, plan, chunk_elements=chunk)
    for src, dst in plan:
        assert torch.equal(k[dst], k0[src]) and torch.equal(v[dst], v0[src]), f"seed {seed}"
    for blk in (0, 1, 3, 4, 7, 8, 9):
        assert torch.equal(k[blk], k0[blk]) and torch.equal(v[blk], v0[blk]), f"seed {seed}"


def test_tensor_plan_and_empty_plan():
    """A [num_pairs, 2] int tensor works like a list; an empty plan changes nothing."""
    k, v = _caches(0)
    k0 = k.clone()
    copy_blocks(k, v, [])
    assert torch.equal(k, k0)
    copy_blocks(k, v, torch.tensor([[4, 9]], dtype=torch.int32))
    assert torch.equal(k[9], k0[4])


def test_rejects_chained_or_out_of_range_plans():
    """A destination that is also a source, or an id outside the cache, raises ValueError."""
    k, v = _caches(0)
    with pytest.raises(ValueError, match="also a source"):
        copy_blocks(k, v, [(1, 2), (2, 3)])
    with pytest.raises(ValueError, match="outside"):
        copy_blocks(k, v, [(1, 10)])
