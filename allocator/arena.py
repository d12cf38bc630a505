"""Linear slot arenas for the contiguous-preallocation baselines (the paper's Orca and FT).

A contiguous manager places each request's whole reservation in one run of adjacent KV slots.
This module holds what every placement policy shares: the ``Region`` value, the ``SlotArena``
protocol and ``NoFreeBlocksError``; ``placement.make_arena`` builds one by name. The
policies live beside it:
``arena_buddy.py`` (power-of-two regions with buddy merges, the paper's assumption) and
``arena_first_fit.py`` (exact-size regions, lowest-address hole, coalescing frees).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True, order=True)
class Region:
    """Slots ``[start, start + size)`` of an arena, held by one owner.

    ``size`` is what the arena actually handed out, which may exceed the number of slots asked
    for (a buddy arena rounds up to a power of two).
    """

    start: int
    size: int

    @property
    def end(self) -> int:
        """One past the last slot."""
        return self.start + self.size


class SlotArena(Protocol):
    """One linear arena of ``capacity`` slots, numbered ``0 .. capacity - 1``.

    Invariants (checked by ``check_invariants``): allocated regions never overlap; allocated
    regions plus free space tile the arena exactly; ``num_free_slots`` equals the free space.
    """

    capacity: int

    def region_size(self, num_slots: int) -> int:
        """Slots a request for ``num_slots`` would actually hold (after rounding)."""
        ...

    def max_region_size(self) -> int:
        """The largest region this arena can hand out when it is completely free."""
        ...

    def can_allocate(self, num_slots: int) -> bool:
        """Whether one region of ``num_slots`` fits now (total free space is not enough)."""
        ...

    def allocate(self, num_slots: int) -> Region:
        """Place one region; raises ``NoFreeBlocksError`` when ``can_allocate`` is False."""
        ...

    def free(self, region: Region) -> None:
        """Give a region back; raises ``ValueError`` if it is not allocated."""
        ...

    def num_free_slots(self) -> int:
        """Total free slots, contiguous or not."""
        ...

    def largest_free_region(self) -> int:
        """Size of the largest run of adjacent free slots (0 when full).

        First-fit can place a region of this size; a buddy arena may not (alignment).
        """
        ...

    def allocated_regions(self) -> list[Region]:
        """Every allocated region, in address order (slow; for checks and tests)."""
        ...

    def free_regions(self) -> list[Region]:
        """The maximal runs of adjacent free slots, in address order."""
        ...

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` if the arena's bookkeeping is inconsistent."""
        ...


def check_tiling(capacity: int, allocated: list[Region], free: list[Region]) -> None:
    """Assert that allocated and free regions cover ``[0, capacity)`` once, without overlap."""
    pos = 0
    for region in sorted(allocated + free, key=lambda r: r.start):
        assert region.size > 0, f"empty region {region}"
        assert region.start == pos, f"gap or overlap at slot {pos}: next region is {region}"
        pos = region.end
    assert pos == capacity, f"regions cover {pos} slots, arena has {capacity}"


def validate_num_slots(num_slots: int) -> None:
    """Raise ``ValueError`` unless ``num_slots`` is a positive int."""
    if num_slots < 1:
        raise ValueError(f"a region needs at least 1 slot, asked for {num_slots}")

