"""Placement policies of the contiguous baselines, by name (``ManagerConfig.placement``).

``make_arena`` maps "buddy" to ``arena_buddy.BuddyArena`` (power-of-two regions, the paper's
assumption) and "first-fit" to ``arena_first_fit.FirstFitArena`` (exact-size regions). It lives
apart from ``arena.py`` so that the policies can import the shared types without a circle.
"""
from __future__ import annotations

from allocator.arena import SlotArena
from allocator.arena_buddy import BuddyArena
from allocator.arena_first_fit import FirstFitArena

PLACEMENTS = ("buddy", "first-fit")


def make_arena(placement: str, capacity: int) -> SlotArena:
    """Build the arena for a placement policy name.

    Args:
        placement: "buddy" or "first-fit".
        capacity: usable slots, >= 0.

    Raises:
        ValueError: unknown placement or negative capacity.
    """
    if placement == "buddy":
        return BuddyArena(capacity)
    if placement == "first-fit":
        return FirstFitArena(capacity)
    raise ValueError(f"placement must be 'buddy' or 'first-fit', got {placement!r}")
