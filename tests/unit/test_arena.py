"""Unit tests for the linear slot arenas: buddy, first-fit and the shared hole set."""
from __future__ import annotations

import pytest

from allocator.arena import Region
from allocator.arena_buddy import BuddyArena, order_for, power_of_two_chunks
from allocator.arena_first_fit import FirstFitArena
from allocator.arena_holes import HoleSet
from allocator.interface import NoFreeBlocksError
from allocator.placement import make_arena


def test_order_for_rounds_up_to_a_power_of_two() -> None:
    """order_for gives the exponent of the smallest power of two holding n slots."""
    assert [order_for(n) for n in (1, 2, 3, 4, 5, 25, 32, 33)] == [0, 1, 2, 2, 3, 5, 5, 6]


def test_chunks_are_maximal_aligned_powers_of_two() -> None:
    """A 48-slot arena is cut into 32 at 0 and 16 at 32; the OPT-13B pool into 8 chunks."""
    assert power_of_two_chunks(48) == [Region(0, 32), Region(32, 16)]
    chunks = power_of_two_chunks(999 * 16)
    assert [c.size for c in chunks] == [8192, 4096, 2048, 1024, 512, 64, 32, 16]
    assert all(c.start % (2 * c.size) == 0 for c in chunks)
    assert power_of_two_chunks(0) == []


def test_buddy_rounds_up_and_splits_towards_low_addresses() -> None:
    """A 3-slot request takes a 4-slot block at 0; splitting frees 4, 8 and 16 above it."""
    arena = BuddyArena(32)
    assert arena.allocate(3) == Region(0, 4)
    assert arena.free_blocks() == [Region(4, 4), Region(8, 8), Region(16, 16)]
    assert arena.allocate(1) == Region(4, 1)
    assert arena.num_free_slots() == 32 - 5
    arena.check_invariants()


def test_buddy_merges_restore_the_whole_arena() -> None:
    """Freeing every block in any order merges buddies back into the original chunks."""
    arena = BuddyArena(48)
    regions = [arena.allocate(n) for n in (5, 1, 9, 3, 16)]
    for region in regions[::2][::-1] + regions[1::2]:
        arena.free(region)
        arena.check_invariants()
    assert arena.free_blocks() == power_of_two_chunks(48)
    assert arena.largest_free_region() == 48


def test_buddy_never_spans_chunks() -> None:
    """In a 48-slot arena the largest block is 32: a 33-slot request never fits."""
    arena = BuddyArena(48)
    assert arena.max_region_size() == 32
    assert not arena.can_allocate(33)
    assert arena.allocate(32) == Region(0, 32)
    assert arena.allocate(16) == Region(32, 16)
    assert not arena.can_allocate(1)
    with pytest.raises(NoFreeBlocksError):
        arena.allocate(1)


def test_buddy_free_run_can_exceed_the_largest_block() -> None:
    """Free blocks at 8 and 16 form a 16-slot run, but no aligned 16-slot block is free."""
    arena = BuddyArena(32)
    regions = [arena.allocate(8) for _ in range(4)]
    arena.free(regions[1])
    arena.free(regions[2])
    assert arena.free_regions() == [Region(8, 16)]
    assert arena.largest_free_region() == 16
    assert arena.largest_free_block() == 8
    assert not arena.can_allocate(16)
    arena.check_invariants()


def test_buddy_rejects_a_region_it_did_not_hand_out() -> None:
    """Freeing an unknown region, or one with the wrong size, raises ValueError."""
    arena = BuddyArena(16)
    region = arena.allocate(4)
    with pytest.raises(ValueError):
        arena.free(Region(0, 8))
    with pytest.raises(ValueError):
        arena.free(Region(4, 4))
    arena.free(region)
    with pytest.raises(ValueError):
        arena.free(region)


def test_first_fit_takes_the_lowest_hole_that_fits() -> None:
    """After freeing a 3-slot hole, a 3-slot request reuses it and a 4-slot one goes past."""
    arena = FirstFitArena(20)
    a, b, c = arena.allocate(5), arena.allocate(3), arena.allocate(7)
    assert (a.start, b.start, c.start) == (0, 5, 8)
    arena.free(b)
    assert arena.allocate(4) == Region(15, 4)
    assert arena.allocate(3) == Region(5, 3)
    assert arena.num_free_slots() == 1
    arena.check_invariants()


def test_first_fit_refuses_when_no_hole_is_large_enough() -> None:
    """Two 4-slot holes (8 free slots) cannot hold a 5-slot region."""
    arena = FirstFitArena(12)
    regions = [arena.allocate(4) for _ in range(3)]
    arena.free(regions[0])
    arena.free(regions[2])
    assert arena.num_free_slots() == 8
    assert arena.largest_free_region() == 4
    assert not arena.can_allocate(5)
    with pytest.raises(NoFreeBlocksError):
        arena.allocate(5)


def test_first_fit_coalesces_neighbours() -> None:
    """Freeing the middle region last joins both neighbours into one hole."""
    arena = FirstFitArena(30)
    regions = [arena.allocate(10) for _ in range(3)]
    arena.free(regions[0])
    arena.free(regions[2])
    assert len(arena.free_regions()) == 2
    arena.free(regions[1])
    assert arena.free_regions() == [Region(0, 30)]
    arena.check_invariants()


def test_hole_set_carves_and_merges() -> None:
    """Carving the middle of a hole splits it; inserting it back merges the pieces."""
    holes = HoleSet(10)
    holes.carve(3, 4)
    assert holes.regions() == [Region(0, 3), Region(7, 3)]
    assert holes.largest() == 3
    with pytest.raises(ValueError):
        holes.carve(2, 2)
    holes.insert(3, 4)
    assert holes.regions() == [Region(0, 10)]
    holes.check_invariants()


def test_make_arena_and_bad_sizes() -> None:
    """make_arena maps placement names; zero-slot requests and unknown names raise."""
    assert isinstance(make_arena("buddy", 8), BuddyArena)
    assert isinstance(make_arena("first-fit", 8), FirstFitArena)
    with pytest.raises(ValueError, match="placement"):
        make_arena("best-fit", 8)
    for arena in (BuddyArena(8), FirstFitArena(8)):
        with pytest.raises(ValueError):
            arena.allocate(0)
    empty = FirstFitArena(0)
    assert empty.largest_free_region() == 0 and not empty.can_allocate(1)
