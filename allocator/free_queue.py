"""The free-block queue: an intrusive doubly linked list with sentinels (vLLM v0.14).

The front holds the next block to reuse or evict; freed blocks go to the tail in the order
given (``append_n``), or to the front (``prepend_n``, vLLM 0.23+) when they should be reused
first. Because the links live in the blocks themselves, removing a block from the middle on a
prefix-cache hit is O(1), unlike ``deque.remove``.

    head <-> b_front <-> ... <-> b_back <-> tail        (head, tail: sentinels, id -1)
"""

from __future__ import annotations

from collections.abc import Sequence

from allocator.block import KVCacheBlock


class FreeKVCacheBlockQueue:
    """Free blocks in eviction order, front first.

    Invariants: ``num_free_blocks`` equals the number of real blocks linked between the
    sentinels; a block in the queue has both links set; a block out of it has neither.
    """

    __slots__ = ("fake_free_list_head", "fake_free_list_tail", "num_free_blocks")

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self.fake_free_list_head = KVCacheBlock(block_id=-1)
        self.fake_free_list_tail = KVCacheBlock(block_id=-1)
        prev = self.fake_free_list_head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = prev

    def popleft(self) -> KVCacheBlock:
        """Unlink and return the front block.

        Raises:
            ValueError: if the queue is empty.
        """
        head = self.fake_free_list_head
        first = head.next_free_block
        if first is None or first is self.fake_free_list_tail:
            raise ValueError("No free blocks available")
        second = first.next_free_block
        if second is None:
            raise RuntimeError(f"free queue is corrupt: block {first.block_id} has no next link")
        head.next_free_block = second
        second.prev_free_block = head
        first.prev_free_block = first.next_free_block = None
        self.num_free_blocks -= 1
        return first

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Unlink and return the first ``n`` blocks in queue order.

        Raises:
            ValueError: if fewer than ``n`` blocks are free.
        """
        if n == 0:
            return []
        if n > self.num_free_blocks or n < 0:
            raise ValueError(f"cannot pop {n} blocks from a queue of {self.num_free_blocks}")
        self.num_free_blocks -= n
        head = self.fake_free_list_head
        curr = head.next_free_block
        ret = []
        for _ in range(n):
            assert curr is not None
            ret.append(curr)
            nxt = curr.next_free_block
            curr.prev_free_block = curr.next_free_block = None
            curr = nxt
        assert curr is not None
        head.next_free_block = curr
        curr.prev_free_block = head
        return ret

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` from anywhere in the queue in O(1).

        Raises:
            RuntimeError: if the block is not in the queue.
        """
        prev, nxt = block.prev_free_block, block.next_free_block
        if prev is None or nxt is None:
            raise RuntimeError(f"remove() called on block {block.block_id}, which is not free")
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Link ``block`` at the tail."""
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        if last is None:
            raise RuntimeError("free queue is corrupt: the tail sentinel has no prev link")
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Link ``blocks`` at the tail, keeping their order."""
        if not blocks:
            return
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        if last is None:
            raise RuntimeError("free queue is corrupt: the tail sentinel has no prev link")
        for block in blocks:
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Link ``blocks`` at the front, keeping their order (``blocks[0]`` becomes the front)."""
        if not blocks:
            return
        head = self.fake_free_list_head
        first = head.next_free_block
        if first is None:
            raise RuntimeError("free queue is corrupt: the head sentinel has no next link")
        prev = head
        for block in blocks:
            block.prev_free_block = prev
            prev.next_free_block = block
            prev = block
        prev.next_free_block = first
        first.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Walk the queue front to back (tests and invariant checks only)."""
        ret = []
        curr = self.fake_free_list_head.next_free_block
        while curr is not None and curr is not self.fake_free_list_tail:
            ret.append(curr)
            curr = curr.next_free_block
        return ret
