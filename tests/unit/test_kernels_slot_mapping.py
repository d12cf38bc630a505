"""CPU tests of the on-device slot mapping (kernels/slot_mapping.py) under Triton's interpreter.

See tests/unit/test_kernels_decode_attention.py for why TRITON_INTERPRET is set only without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels.slot_mapping import compute_slot_mapping


def _expected(tables, starts, lens, block_size):
    slots = []
    for i, ctx in enumerate(lens):
        n = starts[i + 1] - starts[i]
        for pos in range(ctx - n, ctx):
            slots.append(tables[i][pos // block_size] * block_size + pos % block_size)
    return slots


def test_slots_follow_block_tables_for_new_tokens():
    """New tokens at each context's end map to table[pos // bs] * bs + pos % bs; padding -1."""
    tables = [[3, 3, 1], [0, 5, 2, 7, 9, 11], [4]]
    starts, lens = [0, 4, 5, 8], [20, 41, 3]
    slots = compute_slot_mapping(tables, starts, lens, 8, num_tokens=10)
    assert slots.tolist() == _expected(tables, starts, lens, 8) + [-1, -1]
    assert slots.dtype == torch.int64


def test_long_chunk_spans_several_programs():
    """A chunk longer than one program's tile, with int32 tensor inputs, matches the Python walk."""
    tables = [list(range(40, 0, -1))]
    starts, lens = [0, 300], [310]
    slots = compute_slot_mapping(
        torch.tensor(tables, dtype=torch.int32), torch.tensor(starts), torch.tensor(lens), 8
    )
    assert slots.tolist() == _expected(tables, starts, lens, 8)


def test_rejects_inconsistent_lengths():
    """Offsets that do not match the number of sequences raise ValueError."""
    with pytest.raises(ValueError, match="start offsets"):
        compute_slot_mapping([[1]], [0, 1, 2], [1], 8)
