"""The free holes of a linear arena: maximal runs of adjacent free slots, coalesced.

First-fit placement searches them; both arenas answer "largest free contiguous region"
(the external-fragmentation measure of ``allocator/waste.py``) from them. A buddy arena
keeps them beside its free lists, because two adjacent free buddy blocks of different
parents form one contiguous run although the buddy system cannot hand it out whole.
"""
from __future__ import annotations

import bisect
import heapq
import itertools

from allocator.arena import Region


class HoleSet:
    """Sorted, coalesced free runs with an O(log n) amortised largest-run query.

    Invariants: holes are non-empty, sorted by start and never adjacent (``insert`` merges
    neighbours); ``num_free`` is their total size. The max-heap may hold stale entries
    (holes since split or merged); the query drops them lazily.
    """

    def __init__(self, capacity: int) -> None:
        self._starts: list[int] = []
        self._size: dict[int, int] = {}
        self._start_of_end: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []
        self.num_free = 0
        if capacity > 0:
            self._add(0, capacity, index=0)

    def first_fit(self, num_slots: int) -> int | None:
        """Start of the lowest-address hole of at least ``num_slots`` slots, if any."""
        if num_slots > self.largest():
            return None
        for start in self._starts:
            if self._size[start] >= num_slots:
                return start
        raise AssertionError("largest hole not found in the hole list")

    def carve(self, start: int, num_slots: int) -> None:
        """Mark ``[start, start + num_slots)`` used; it must lie inside one hole."""
        index = bisect.bisect_right(self._starts, start) - 1
        hole_start = self._starts[index] if index >= 0 else -1
        hole_end = hole_start + self._size.get(hole_start, 0)
        if index < 0 or start + num_slots > hole_end:
            raise ValueError(f"slots [{start}, {start + num_slots}) are not free")
        self._remove(hole_start, index)
        if start > hole_start:
            self._add(hole_start, start - hole_start, index)
            index += 1
        if hole_end > start + num_slots:
            self._add(start + num_slots, hole_end - start - num_slots, index)

    def insert(self, start: int, num_slots: int) -> None:
        """Mark ``[start, start + num_slots)`` free, merging with the holes beside it."""
        end = start + num_slots
        index = bisect.bisect_left(self._starts, start)
        prev_start = self._start_of_end.get(start)
        if prev_start is not None:
            index -= 1
            self._remove(prev_start, index)
            start = prev_start
        next_size = self._size.get(end)
        if next_size is not None:
            self._remove(end, index)
            end += next_size
        self._add(start, end - start, index)

    def largest(self) -> int:
        """Size of the largest hole (0 when none)."""
        heap = self._heap
        while heap and self._size.get(heap[0][1]) != -heap[0][0]:
            heapq.heappop(heap)
        return -heap[0][0] if heap else 0

    def regions(self) -> list[Region]:
        """Every hole, in address order."""
        return [Region(s, self._size[s]) for s in self._starts]

    def check_invariants(self) -> None:
        """Assert order, coalescing, the end index, the free count and the largest query."""
        holes = self.regions()
        assert self._starts == sorted(self._size), "hole list out of order"
        for left, right in itertools.pairwise(holes):
            assert left.end < right.start, f"holes {left} and {right} overlap or touch"
        assert self._start_of_end == {h.end: h.start for h in holes}, "end index drifted"
        assert self.num_free == sum(h.size for h in holes), "free-slot count drifted"
        assert self.largest() == max((h.size for h in holes), default=0), "largest drifted"

    def _add(self, start: int, size: int, index: int) -> None:
        assert size > 0
        self._starts.insert(index, start)
        self._size[start] = size
        self._start_of_end[start + size] = start
        self.num_free += size
        heapq.heappush(self._heap, (-size, start))
        # The query normally pops stale entries; rebuild when they pile up below the top.
        if len(self._heap) > 2 * len(self._starts) + 64:
            self._heap = [(-self._size[s], s) for s in self._starts]
            heapq.heapify(self._heap)

    def _remove(self, start: int, index: int) -> None:
        assert self._starts[index] == start
        del self._starts[index]
        size = self._size.pop(start)
        del self._start_of_end[start + size]
        self.num_free -= size
