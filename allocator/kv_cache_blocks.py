"""The allocation result handed to the scheduler (vLLM v0.14 ``KVCacheBlocks``).

It holds one block list per KV-cache group, so callers read block ids without touching the
allocator's own lists. pagedsim has one group, so ``blocks`` is a 1-tuple.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Literal, overload

from allocator.block import KVCacheBlock


@dataclass(slots=True)
class KVCacheBlocks:
    """Blocks per KV-cache group: ``blocks[g]`` is group g's list, in block-table order."""

    blocks: tuple[Sequence[KVCacheBlock], ...]

    def __add__(self, other: KVCacheBlocks) -> KVCacheBlocks:
        """Concatenate group by group."""
        return KVCacheBlocks(tuple(list(chain(a, b)) for a, b in zip(self.blocks, other.blocks)))

    @overload
    def get_block_ids(self, allow_none: Literal[False] = False) -> tuple[list[int], ...]: ...

    @overload
    def get_block_ids(self, allow_none: bool) -> tuple[list[int], ...] | None: ...

    def get_block_ids(self, allow_none: bool = False) -> tuple[list[int], ...] | None:
        """Block ids per group; with ``allow_none``, None when every group is empty."""
        if allow_none and all(len(group) == 0 for group in self.blocks):
            return None
        return tuple([block.block_id for block in group] for group in self.blocks)

    def get_unhashed_block_ids(self) -> list[int]:
        """Ids of the blocks without a hash (one group only)."""
        if len(self.blocks) != 1:
            raise ValueError(f"only one group is supported, got {len(self.blocks)}")
        return [block.block_id for block in self.blocks[0] if block.block_hash is None]

    def new_empty(self) -> KVCacheBlocks:
        """An empty result with the same number of groups."""
        return KVCacheBlocks(tuple(() for _ in self.blocks))
