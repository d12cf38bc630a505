"""First-fit placement: exact-size regions in the lowest-address hole that is large enough.

The alternative to buddy placement (``--placement first-fit``): no rounding, so no waste
inside a region, but holes between live regions can still be too small for the next request
(external fragmentation). Freeing a region coalesces it with the free holes on either side,
so the arena is one hole again once everything is freed.
"""
from __future__ import annotations

from allocator.arena import Region, check_tiling, validate_num_slots
from allocator.arena_holes import HoleSet
from allocator.interface import NoFreeBlocksError


class FirstFitArena:
    """Exact-size regions over ``capacity`` slots; the free space is a ``HoleSet``.

    Invariants: allocated regions and holes tile the arena; holes are coalesced. Placement
    scans holes in address order (O(holes)); a region larger than the largest hole is
    refused in O(log holes) amortised.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"arena capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._holes = HoleSet(capacity)
        self._allocated: dict[int, int] = {}

    def region_size(self, num_slots: int) -> int:
        validate_num_slots(num_slots)
        return num_slots

    def max_region_size(self) -> int:
        return self.capacity

    def can_allocate(self, num_slots: int) -> bool:
        validate_num_slots(num_slots)
        return num_slots <= self._holes.largest()

    def allocate(self, num_slots: int) -> Region:
        validate_num_slots(num_slots)
        start = self._holes.first_fit(num_slots)
        if start is None:
            raise NoFreeBlocksError(
                f"no free hole of {num_slots} slots (largest free: "
                f"{self._holes.largest()}, total free: {self._holes.num_free})"
            )
        self._holes.carve(start, num_slots)
        self._allocated[start] = num_slots
        return Region(start, num_slots)

    def free(self, region: Region) -> None:
        if self._allocated.get(region.start) != region.size:
            raise ValueError(f"{region} is not an allocated region of this first-fit arena")
        del self._allocated[region.start]
        self._holes.insert(region.start, region.size)

    def num_free_slots(self) -> int:
        return self._holes.num_free

    def largest_free_region(self) -> int:
        return self._holes.largest()

    def allocated_regions(self) -> list[Region]:
        return sorted(Region(s, n) for s, n in self._allocated.items())

    def free_regions(self) -> list[Region]:
        return self._holes.regions()

    def check_invariants(self) -> None:
        self._holes.check_invariants()
        check_tiling(self.capacity, self.allocated_regions(), self.free_regions())
