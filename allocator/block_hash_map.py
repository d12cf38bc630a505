"""The prefix-cache index: block hash + group id -> the cached block(s) (vLLM v0.14).

Full blocks are findable by the key of their contents until they are handed out again. Two
requests that computed the same block independently both keep their own block, so a key maps to
one block or, rarely, to several.
"""

from __future__ import annotations

from allocator.block import KVCacheBlock
from allocator.hashing import BlockHashWithGroupId


class BlockHashToBlockMap:
    """Prefix-cache index: key -> one block, or ``{block_id: block}`` when several share the key.

    Duplicates are kept, not merged, because block tables are append-only: two requests that
    computed the same full block independently both keep their own block id.
    """

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[BlockHashWithGroupId, KVCacheBlock | dict[int, KVCacheBlock]] = {}

    def get_one_block(self, key: BlockHashWithGroupId) -> KVCacheBlock | None:
        """The block cached under ``key`` (the earliest inserted one still present), or None."""
        blocks = self._cache.get(key)
        if blocks is None or isinstance(blocks, KVCacheBlock):
            return blocks
        return next(iter(blocks.values()))

    def insert(self, key: BlockHashWithGroupId, block: KVCacheBlock) -> None:
        """Cache ``block`` under ``key``, beside any blocks already there."""
        blocks = self._cache.get(key)
        if blocks is None:
            self._cache[key] = block
        elif isinstance(blocks, KVCacheBlock):
            self._cache[key] = {blocks.block_id: blocks, block.block_id: block}
        else:
            blocks[block.block_id] = block

    def pop(self, key: BlockHashWithGroupId, block_id: int) -> KVCacheBlock | None:
        """Remove and return block ``block_id`` from ``key``'s entry; None if it is not there."""
        blocks = self._cache.pop(key, None)
        if blocks is None:
            return None
        if isinstance(blocks, KVCacheBlock):
            if blocks.block_id == block_id:
                return blocks
            self._cache[key] = blocks
            return None
        block = blocks.pop(block_id, None)
        if blocks:
            # Stays a dict even with one block left, as in vLLM.
            self._cache[key] = blocks
        return block

    def items(self) -> list[tuple[BlockHashWithGroupId, list[KVCacheBlock]]]:
        """Every key with its blocks in insertion order (for checks and tests)."""
        return [
            (key, [blocks] if isinstance(blocks, KVCacheBlock) else list(blocks.values()))
            for key, blocks in self._cache.items()
        ]

    def __len__(self) -> int:
        return len(self._cache)
