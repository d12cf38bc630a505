"""Buddy placement: regions are powers of two, split on demand and merged with their buddy.

This is the address allocator the PagedAttention paper assumes for its Orca baselines. A
request for ``n`` slots takes a block of ``2^ceil(log2 n)`` slots, so rounding is part of the
cost of contiguous preallocation (it is internal fragmentation in ``allocator/waste.py``).
The arena need not be a power of two: it is cut into maximal power-of-two chunks, each
aligned to its own size, and no block ever spans two chunks. Beside its free lists the arena
keeps the coalesced free runs (``HoleSet``) for the largest-free-contiguous-region query.
"""
from __future__ import annotations

from allocator.arena import Region, check_tiling, validate_num_slots
from allocator.arena_holes import HoleSet
from allocator.interface import NoFreeBlocksError


def order_for(num_slots: int) -> int:
    """The smallest ``k`` with ``2^k >= num_slots`` (``num_slots >= 1``)."""
    return (num_slots - 1).bit_length()


def power_of_two_chunks(capacity: int) -> list[Region]:
    """Split ``[0, capacity)`` greedily into decreasing powers of two, from address 0.

    Each chunk starts at a multiple of twice its own size (every earlier chunk is larger),
    so the buddy of a chunk, ``start ^ size``, is just past it, where the arena either ends or
    a smaller chunk begins: merging can never cross a chunk boundary. Example, 48 slots::

        0                32        48
        |  chunk 2^5     | 2^4     |
    """
    chunks: list[Region] = []
    start = 0
    for k in reversed(range(capacity.bit_length())):
        if capacity & (1 << k):
            chunks.append(Region(start, 1 << k))
            start += 1 << k
    return chunks


class BuddyArena:
    """Binary buddy allocator over ``capacity`` slots.

    Invariants: every block (free or allocated) of order ``k`` starts at a multiple of ``2^k``
    and lies inside one chunk; free and allocated blocks tile the arena; no two free buddies
    of the same order coexist (frees merge eagerly), so freeing everything restores the chunks.
    Placement takes the smallest order that fits, lowest address first. The free runs
    (``free_regions``) are the free blocks with adjacent ones joined: a run can be larger
    than any block the arena could hand out (``largest_free_block``), e.g. two free 8-slot
    blocks at 8 and 16 make a 16-slot run that no aligned 16-slot block covers.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"arena capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self.chunks = power_of_two_chunks(capacity)
        self._max_order = max(capacity.bit_length() - 1, 0)
        self._free: list[set[int]] = [set() for _ in range(self._max_order + 1)]
        for chunk in self.chunks:
            self._free[order_for(chunk.size)].add(chunk.start)
        self._allocated: dict[int, int] = {}
        self._num_free = capacity
        self._runs = HoleSet(capacity)

    def region_size(self, num_slots: int) -> int:
        validate_num_slots(num_slots)
        return 1 << order_for(num_slots)

    def max_region_size(self) -> int:
        return self.chunks[0].size if self.chunks else 0

    def can_allocate(self, num_slots: int) -> bool:
        validate_num_slots(num_slots)
        return self._smallest_free_order(order_for(num_slots)) is not None

    def allocate(self, num_slots: int) -> Region:
        validate_num_slots(num_slots)
        order = order_for(num_slots)
        found = self._smallest_free_order(order)
        if found is None:
            raise NoFreeBlocksError(
                f"no free buddy block of {1 << order} slots (largest free block: "
                f"{self.largest_free_block()}, total free: {self._num_free})"
            )
        start = min(self._free[found])
        self._free[found].remove(start)
        # Keep the lower half and free the upper half at each split, so placement packs
        # towards low addresses.
        while found > order:
            found -= 1
            self._free[found].add(start + (1 << found))
        self._allocated[start] = order
        self._num_free -= 1 << order
        self._runs.carve(start, 1 << order)
        return Region(start, 1 << order)

    def free(self, region: Region) -> None:
        order = self._allocated.get(region.start)
        if order is None or (1 << order) != region.size:
            raise ValueError(f"{region} is not an allocated region of this buddy arena")
        del self._allocated[region.start]
        self._num_free += region.size
        self._runs.insert(region.start, region.size)
        start = region.start
        while order < self._max_order:
            buddy = start ^ (1 << order)
            if buddy not in self._free[order]:
                break
            self._free[order].remove(buddy)
            start = min(start, buddy)
            order += 1
        self._free[order].add(start)

    def num_free_slots(self) -> int:
        return self._num_free

    def largest_free_region(self) -> int:
        return self._runs.largest()

    def largest_free_block(self) -> int:
        """The largest region ``allocate`` could hand out now (a free buddy block)."""
        for order in range(self._max_order, -1, -1):
            if self._free[order]:
                return 1 << order
        return 0

    def allocated_regions(self) -> list[Region]:
        return sorted(Region(s, 1 << k) for s, k in self._allocated.items())

    def free_regions(self) -> list[Region]:
        return self._runs.regions()

    def free_blocks(self) -> list[Region]:
        """Every free buddy block, in address order."""
        return sorted(Region(s, 1 << k) for k, starts in enumerate(self._free) for s in starts)

    def check_invariants(self) -> None:
        allocated = self.allocated_regions()
        free = self.free_blocks()
        check_tiling(self.capacity, allocated, free)
        for region in allocated + free:
            assert region.start % region.size == 0, f"{region} is not aligned to its size"
            assert any(
                c.start <= region.start and region.end <= c.end for c in self.chunks
            ), f"{region} spans two chunks"
        for order, starts in enumerate(self._free):
            for start in starts:
                buddy = start ^ (1 << order)
                assert buddy not in starts, f"free buddies {start} and {buddy} not merged"
        assert self._num_free == sum(r.size for r in free), "free-slot count drifted"
        self._runs.check_invariants()
        check_tiling(self.capacity, allocated, self._runs.regions())

    def _smallest_free_order(self, order: int) -> int | None:
        for candidate in range(order, self._max_order + 1):
            if self._free[candidate]:
                return candidate
        return None
