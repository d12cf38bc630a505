"""Worker-side block tables and slot mapping (vLLM v0.14 ``vllm/v1/worker/block_table.py``).

Rows of a fixed int32 array hold each running request's block ids, the form a paged-attention
kernel reads. ``compute_slot_mapping`` turns (request row, token position) pairs into KV-cache
slots, ``block_id * block_size + position % block_size``. When kernels use smaller blocks than
the manager, each manager block id is split into consecutive kernel block ids. The only numpy
module in the allocator package.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

PAD_SLOT_ID = -1
"""Slot id written for padding tokens past the batch: kernels skip them."""

IntArray = npt.NDArray[np.int64]


class BlockTable:
    """Block ids of up to ``max_num_reqs`` requests, one row each, in kernel blocks.

    Invariants: row r's first ``num_blocks_per_row[r]`` entries are its block ids (kernel block
    ids when ``kernel_block_size`` divides the manager block size); ``slot_mapping`` holds the
    last computed mapping followed by ``PAD_SLOT_ID`` padding.
    """

    def __init__(
        self,
        block_size: int,
        max_num_reqs: int,
        max_num_blocks_per_req: int,
        max_num_batched_tokens: int,
        kernel_block_size: int | None = None,
    ) -> None:
        for name, value in (
            ("block_size", block_size),
            ("max_num_reqs", max_num_reqs),
            ("max_num_blocks_per_req", max_num_blocks_per_req),
            ("max_num_batched_tokens", max_num_batched_tokens),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if kernel_block_size is None:
            kernel_block_size = block_size
        if kernel_block_size < 1 or block_size % kernel_block_size != 0:
            raise ValueError(
                f"kernel_block_size {kernel_block_size} must divide block_size {block_size}"
            )
        self.blocks_per_kv_block = block_size // kernel_block_size
        self.use_hybrid_blocks = self.blocks_per_kv_block > 1
        self.block_size = kernel_block_size
        self.max_num_reqs = max_num_reqs
        self.max_num_blocks_per_req = max_num_blocks_per_req * self.blocks_per_kv_block
        self.max_num_batched_tokens = max_num_batched_tokens
        self.block_table = np.zeros((max_num_reqs, self.max_num_blocks_per_req), dtype=np.int32)
        self.num_blocks_per_row = np.zeros(max_num_reqs, dtype=np.int32)
        self.slot_mapping = np.full(max_num_batched_tokens, PAD_SLOT_ID, dtype=np.int64)
        self._kernel_block_arange = np.arange(self.blocks_per_kv_block, dtype=np.int64)

    def append_row(self, block_ids: Sequence[int], row_idx: int) -> None:
        """Append manager block ids to row ``row_idx``.

        Raises:
            ValueError: if the row would exceed ``max_num_blocks_per_req``.
        """
        if len(block_ids) == 0:
            return
        ids = np.asarray(block_ids, dtype=np.int64)
        if self.use_hybrid_blocks:
            ids = self.map_to_kernel_blocks(
                ids, self.blocks_per_kv_block, self._kernel_block_arange
            )
        start = int(self.num_blocks_per_row[row_idx])
        end = start + len(ids)
        if end > self.max_num_blocks_per_req:
            raise ValueError(
                f"row {row_idx} would hold {end} blocks, more than {self.max_num_blocks_per_req}"
            )
        self.block_table[row_idx, start:end] = ids
        self.num_blocks_per_row[row_idx] = end

    def add_row(self, block_ids: Sequence[int], row_idx: int) -> None:
        """Replace row ``row_idx`` with ``block_ids`` (a new or resumed request)."""
        self.num_blocks_per_row[row_idx] = 0
        self.append_row(block_ids, row_idx)

    def move_row(self, src: int, tgt: int) -> None:
        """Copy row ``src`` onto row ``tgt``; the source is left as is (0.14)."""
        num_blocks = int(self.num_blocks_per_row[src])
        self.block_table[tgt, :num_blocks] = self.block_table[src, :num_blocks]
        self.num_blocks_per_row[tgt] = num_blocks

    def swap_row(self, src: int, tgt: int) -> None:
        """Exchange rows ``src`` and ``tgt`` with their counts."""
        self.num_blocks_per_row[[src, tgt]] = self.num_blocks_per_row[[tgt, src]]
        self.block_table[[src, tgt]] = self.block_table[[tgt, src]]

    def clear_row(self, row_idx: int) -> None:
        """Empty row ``row_idx``."""
        self.block_table[row_idx].fill(0)
        self.num_blocks_per_row[row_idx] = 0

    def clear(self) -> None:
        """Empty every row and the slot mapping."""
        self.block_table.fill(0)
        self.num_blocks_per_row.fill(0)
        self.slot_mapping.fill(PAD_SLOT_ID)

    def compute_slot_mapping(
        self, req_indices: npt.ArrayLike, positions: npt.ArrayLike
    ) -> IntArray:
        """Slots of the batch's tokens; entries past them in ``slot_mapping`` become -1.

        Token t of the batch belongs to row ``req_indices[t]`` at position ``positions[t]``::

            block_number = block_table[row, position // block_size]
            slot         = block_number * block_size + position % block_size

        Returns:
            ``slot_mapping[:num_tokens]`` (a view).

        Raises:
            ValueError: if the batch is larger than ``max_num_batched_tokens`` or a position
                lies beyond its row's blocks.
        """
        rows = np.asarray(req_indices, dtype=np.int64)
        pos = np.asarray(positions, dtype=np.int64)
        num_tokens = len(pos)
        if len(rows) != num_tokens or num_tokens > self.max_num_batched_tokens:
            raise ValueError(
                f"bad batch: {len(rows)} row indices, {num_tokens} positions, "
                f"max_num_batched_tokens={self.max_num_batched_tokens}"
            )
        block_idx = pos // self.block_size
        beyond = (pos < 0) | (block_idx >= self.num_blocks_per_row[rows])
        if beyond.any():
            t = int(np.argmax(beyond))
            raise ValueError(
                f"token {t}: position {pos[t]} lies beyond the "
                f"{self.num_blocks_per_row[rows[t]]} blocks of row {rows[t]}"
            )
        block_numbers = self.block_table[rows, block_idx].astype(np.int64)
        out = self.slot_mapping[:num_tokens]
        np.add(block_numbers * self.block_size, pos % self.block_size, out=out)
        self.slot_mapping[num_tokens:] = PAD_SLOT_ID
        return out

    def get_numpy_array(self) -> npt.NDArray[np.int32]:
        """The whole ``[max_num_reqs, max_num_blocks_per_req]`` table."""
        return self.block_table

    @staticmethod
    def map_to_kernel_blocks(
        kv_manager_block_ids: npt.ArrayLike,
        blocks_per_kv_block: int,
        kernel_block_arange: npt.ArrayLike,
    ) -> IntArray:
        """Split each manager block id into ``blocks_per_kv_block`` consecutive kernel block ids.

        Example with 2 kernel blocks per manager block: ``[0, 1, 2] -> [0, 1, 2, 3, 4, 5]``.
        """
        ids = np.asarray(kv_manager_block_ids, dtype=np.int64).reshape(-1, 1)
        arange = np.asarray(kernel_block_arange, dtype=np.int64).reshape(1, -1)
        result: IntArray = (ids * blocks_per_kv_block + arange).reshape(-1)
        return result
