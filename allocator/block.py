"""The KV-cache block: one fixed-size page of KV memory (vLLM v0.14 ``KVCacheBlock``).

A block carries its id, a reference count (how many requests hold it), the prefix-cache key of
its contents once it is full and cached, and the two intrusive links the free queue uses. Block 0
is the pool's null block, a placeholder for skipped positions that is never freed or cached.
"""

from __future__ import annotations

from dataclasses import dataclass

from allocator.hashing import BlockHashWithGroupId

BlockId = int


@dataclass(slots=True, eq=False)
class KVCacheBlock:
    """A block of the pool; compared by identity.

    Invariants (kept by BlockPool): a non-null block is in the free queue iff ``ref_cnt == 0``;
    a free block with a hash is an evictable cached block and still counts as free; the hash is
    set at most once between resets. The null block's ``ref_cnt`` is not maintained (it drifts,
    as in vLLM 0.14) and must not be read.
    """

    block_id: BlockId
    ref_cnt: int = 0
    _block_hash: BlockHashWithGroupId | None = None
    prev_free_block: KVCacheBlock | None = None
    next_free_block: KVCacheBlock | None = None
    is_null: bool = False

    @property
    def block_hash(self) -> BlockHashWithGroupId | None:
        """The prefix-cache key (block hash + group id) of a full cached block, else None."""
        return self._block_hash

    @block_hash.setter
    def block_hash(self, block_hash: BlockHashWithGroupId) -> None:
        if self._block_hash is not None:
            raise ValueError(
                f"block {self.block_id} already has hash {self._block_hash.hex()}; "
                "reset_hash() must come first"
            )
        self._block_hash = block_hash

    def reset_hash(self) -> None:
        """Forget the hash (the block is evicted from the prefix cache)."""
        self._block_hash = None

    def __repr__(self) -> str:
        prev_id = self.prev_free_block.block_id if self.prev_free_block else None
        next_id = self.next_free_block.block_id if self.next_free_block else None
        block_hash = self._block_hash.hex()[:16] if self._block_hash else None
        return (
            f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, "
            f"block_hash={block_hash}, prev_free_block={prev_id}, "
            f"next_free_block={next_id}, is_null={self.is_null})"
        )
