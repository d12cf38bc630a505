"""Unit tests for allocator/free_queue.py: the intrusive doubly linked free list."""

from __future__ import annotations

import pytest

from allocator.block import KVCacheBlock
from allocator.free_queue import FreeKVCacheBlockQueue


def ids(queue: FreeKVCacheBlockQueue) -> list[int]:
    return [block.block_id for block in queue.get_all_free_blocks()]


def make(n: int) -> tuple[list[KVCacheBlock], FreeKVCacheBlockQueue]:
    blocks = [KVCacheBlock(i) for i in range(n)]
    return blocks, FreeKVCacheBlockQueue(blocks)


def test_init_links_in_order() -> None:
    """The queue links blocks in the given order between the sentinels."""
    blocks, queue = make(4)
    assert ids(queue) == [0, 1, 2, 3] and queue.num_free_blocks == 4
    assert queue.fake_free_list_head.next_free_block is blocks[0]
    assert queue.fake_free_list_tail.prev_free_block is blocks[3]
    assert blocks[0].prev_free_block is queue.fake_free_list_head


def test_empty_queue() -> None:
    """An empty queue links head to tail and popleft raises ValueError."""
    _, queue = make(0)
    assert queue.fake_free_list_head.next_free_block is queue.fake_free_list_tail
    with pytest.raises(ValueError, match="No free blocks"):
        queue.popleft()


def test_popleft_unlinks() -> None:
    """popleft returns the front block with its links cleared."""
    blocks, queue = make(3)
    first = queue.popleft()
    assert first is blocks[0]
    assert first.prev_free_block is None and first.next_free_block is None
    assert ids(queue) == [1, 2] and queue.num_free_blocks == 2


def test_popleft_n_order_and_errors() -> None:
    """popleft_n returns blocks in queue order; 0 gives []; too many raises ValueError."""
    _, queue = make(5)
    assert queue.popleft_n(0) == []
    got = queue.popleft_n(3)
    assert [b.block_id for b in got] == [0, 1, 2]
    assert all(b.prev_free_block is None and b.next_free_block is None for b in got)
    assert ids(queue) == [3, 4] and queue.num_free_blocks == 2
    with pytest.raises(ValueError, match="3"):
        queue.popleft_n(3)
    assert queue.popleft_n(2)[1].block_id == 4
    assert ids(queue) == [] and queue.num_free_blocks == 0


def test_remove_middle_and_not_free() -> None:
    """remove unlinks a middle block in O(1); removing it again raises RuntimeError."""
    blocks, queue = make(4)
    queue.remove(blocks[2])
    assert ids(queue) == [0, 1, 3] and queue.num_free_blocks == 3
    with pytest.raises(RuntimeError, match="block 2"):
        queue.remove(blocks[2])


def test_append_and_append_n_keep_order() -> None:
    """Freed blocks go to the tail in the order given."""
    blocks, queue = make(5)
    taken = queue.popleft_n(5)
    queue.append(taken[3])
    queue.append_n([taken[1], taken[4]])
    queue.append_n([])
    queue.append(taken[0])
    assert ids(queue) == [3, 1, 4, 0] and queue.num_free_blocks == 4
    assert queue.popleft() is blocks[3]


def test_interleaved_operations_match_list_model() -> None:
    """A scripted mix of operations leaves the queue equal to a plain-list model."""
    blocks, queue = make(8)
    model = list(range(8))
    out: list[KVCacheBlock] = []
    for step in range(40):
        if step % 3 == 0 and model:
            out.append(queue.popleft())
            model.pop(0)
        elif step % 3 == 1 and len(model) > 2:
            victim = blocks[model[len(model) // 2]]
            queue.remove(victim)
            model.remove(victim.block_id)
            out.append(victim)
        elif out:
            block = out.pop(0)
            queue.append(block)
            model.append(block.block_id)
        assert ids(queue) == model and queue.num_free_blocks == len(model)


def test_prepend_n_keeps_order_at_the_front() -> None:
    """prepend_n links blocks after the head in list order (vLLM 0.23+), so blocks[0] is next."""
    blocks, queue = make(5)
    queue.popleft_n(3)
    queue.prepend_n([blocks[2], blocks[0]])
    assert ids(queue) == [2, 0, 3, 4] and queue.num_free_blocks == 4
    queue.prepend_n([])
    assert queue.popleft() is blocks[2]
    empty_blocks, empty = make(1)
    empty.popleft()
    empty.prepend_n(empty_blocks)
    assert ids(empty) == [0] and empty.num_free_blocks == 1
