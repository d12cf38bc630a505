"""Tests of block swapping between caches (kernels/swap.py, plain torch)."""

from __future__ import annotations

import pytest
import torch

from kernels.swap import allocate_cpu_cache, swap_blocks, swap_kv


def test_swap_out_and_back_in_to_other_blocks():
    """Blocks swapped out to a CPU cache and back in to new ids hold the original data."""
    gen = torch.Generator().manual_seed(0)
    k = torch.randn((8, 4, 2, 16), generator=gen)
    v = torch.randn((8, 4, 2, 16), generator=gen)
    k0, v0 = k.clone(), v.clone()
    ck, cv = allocate_cpu_cache(k, 3, pin_memory=False), allocate_cpu_cache(v, 3, pin_memory=False)
    swap_kv((k, v), (ck, cv), [(5, 0), (2, 2)])
    k.zero_()
    v.zero_()
    swap_kv((ck, cv), (k, v), [(0, 7), (2, 1)])
    assert torch.equal(k[7], k0[5]) and torch.equal(v[1], v0[2])
    assert k[5].abs().sum() == 0


def test_swap_rejects_bad_ids_and_shapes():
    """Out-of-range ids or a different block shape raise ValueError."""
    k = torch.zeros((4, 4, 2, 16))
    with pytest.raises(ValueError, match="destination"):
        swap_blocks(k, torch.zeros((2, 4, 2, 16)), [(0, 2)])
    with pytest.raises(ValueError, match="shapes"):
        swap_blocks(k, torch.zeros((4, 8, 2, 16)), [(0, 1)])
