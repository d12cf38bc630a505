"""Unit tests for allocator/block_table.py: rows, slot mapping and kernel-block splitting."""

from __future__ import annotations

import numpy as np
import pytest

from allocator.block_table import PAD_SLOT_ID, BlockTable


def test_rows_add_append_move_swap_clear() -> None:
    """Row operations keep ids and counts as vLLM 0.14 does (move leaves the source)."""
    table = BlockTable(4, max_num_reqs=3, max_num_blocks_per_req=4, max_num_batched_tokens=8)
    table.add_row([5, 6], 0)
    table.append_row([7], 0)
    table.append_row([], 0)
    table.add_row([9], 1)
    assert table.block_table[0, :3].tolist() == [5, 6, 7] and table.num_blocks_per_row[0] == 3
    table.move_row(0, 2)
    assert table.block_table[2, :3].tolist() == [5, 6, 7] and table.num_blocks_per_row[2] == 3
    assert table.num_blocks_per_row[0] == 3
    table.swap_row(0, 1)
    assert table.block_table[0, 0] == 9 and table.num_blocks_per_row.tolist() == [1, 3, 3]
    assert table.block_table[1, :3].tolist() == [5, 6, 7]
    table.add_row([1], 1)
    assert table.num_blocks_per_row[1] == 1
    table.clear_row(2)
    assert table.num_blocks_per_row[2] == 0 and not table.block_table[2].any()
    with pytest.raises(ValueError, match="row 0"):
        table.append_row([1, 2, 3, 4], 0)


def test_compute_slot_mapping_with_padding() -> None:
    """slot = block_id * bs + pos % bs, in batch order; entries past the batch are -1."""
    table = BlockTable(2, max_num_reqs=3, max_num_blocks_per_req=3, max_num_batched_tokens=12)
    table.add_row([4, 7], 0)
    table.add_row([1, 3, 5], 1)
    table.add_row([2, 8], 2)
    rows = [0, 0, 1, 1, 1, 1, 1, 2, 2, 2]
    positions = [0, 1, 0, 1, 2, 3, 4, 0, 1, 2]
    slots = table.compute_slot_mapping(rows, positions)
    assert slots.tolist() == [8, 9, 2, 3, 6, 7, 10, 4, 5, 16]
    assert table.slot_mapping[10:].tolist() == [PAD_SLOT_ID, PAD_SLOT_ID]
    short = table.compute_slot_mapping([1], [4])
    assert short.tolist() == [10] and (table.slot_mapping[1:] == PAD_SLOT_ID).all()


def test_table_indices_match_spec_example() -> None:
    """Spec 7 example: positions [0,1,0,1,2,3,4,0,1,2] read table indices [0,0,K,K,K+1,...]."""
    k = 3
    table = BlockTable(2, max_num_reqs=3, max_num_blocks_per_req=k, max_num_batched_tokens=10)
    for row in range(3):
        table.add_row([row * k + i for i in range(k)], row)
    slots = table.compute_slot_mapping(
        [0, 0, 1, 1, 1, 1, 1, 2, 2, 2], [0, 1, 0, 1, 2, 3, 4, 0, 1, 2]
    )
    indices = (slots // 2).tolist()
    assert indices == [0, 0, k, k, k + 1, k + 1, k + 2, 2 * k, 2 * k, 2 * k + 1]


def test_slot_mapping_rejects_bad_batches() -> None:
    """Positions beyond a row's blocks and oversized batches raise ValueError."""
    table = BlockTable(2, max_num_reqs=2, max_num_blocks_per_req=2, max_num_batched_tokens=3)
    table.add_row([1], 0)
    with pytest.raises(ValueError, match="position 2"):
        table.compute_slot_mapping([0], [2])
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        table.compute_slot_mapping([0] * 4, [0] * 4)


def test_kernel_blocks() -> None:
    """With kernel blocks half the size, ids split in two and slots use the kernel size."""
    mapped = BlockTable.map_to_kernel_blocks(np.array([0, 1, 2]), 2, np.arange(2))
    assert mapped.tolist() == [0, 1, 2, 3, 4, 5]
    assert BlockTable.map_to_kernel_blocks([1], 2, np.arange(2)).tolist() == [2, 3]
    table = BlockTable(
        4, max_num_reqs=1, max_num_blocks_per_req=2, max_num_batched_tokens=4, kernel_block_size=2
    )
    assert table.block_size == 2 and table.max_num_blocks_per_req == 4
    table.add_row([3], 0)
    assert table.block_table[0, :2].tolist() == [6, 7]
    assert table.compute_slot_mapping([0, 0, 0], [0, 2, 3]).tolist() == [12, 14, 15]
    with pytest.raises(ValueError, match="divide"):
        BlockTable(4, 1, 1, 1, kernel_block_size=3)
