"""The memory-waste breakdown: where every usable KV slot is, for paged and contiguous managers.

Capacity is ``(N - 1) x block_size`` usable slots; the null block is reported apart
(``MemorySnapshot.null_slots``), and contiguous managers use the same capacity. Every slot
belongs to exactly one category, decided in this order (the first that applies wins):

1. ``token_states``: holds the KV of a computed token. A slot shared by several sequences
   (copy-on-write, prefix cache) counts once.
2. ``reserved``: held by a request and will be written later by that request. "Later" needs
   the request's true length, ``final_kv_slots`` below.
3. ``internal_frag``: held but never written: beyond the request's final length (an
   over-reservation), buddy rounding, the unused tail of a paged request's last block.
4. ``cached_evictable``: free, but still holding a cached block (paged prefix caching).
5. ``external_frag``: free slots outside the largest free contiguous region (the longest run
   of adjacent free slots), i.e. holes between live regions (always 0 for paged: any free
   block will do). A buddy arena may be unable to hand out even that run whole (alignment,
   and an arena that is not a power of two is cut into power-of-two chunks), so for buddy
   placement this is a lower bound on what it cannot use.
6. ``free``: the rest (the largest free contiguous region for contiguous managers).

One contiguous request, Pow2, prompt 5, true output 6 (so it writes 10 slots), buddy arena,
after 8 tokens are computed::

    slot    0       8 10 13 16
            TTTTTTTTRRiiiiii        token_states 8, reserved 2, internal_frag 3 + 3
            |       | |  '--- 13-15 buddy rounding: a reservation of 13 takes a 16-slot block
            |       | '------ 10-12 over-reservation: 5 + 2^ceil(log2 6) = 13, 10 written
            |       '-------- 8-9   reserved: written later by this request
            '---------------- 0-7   token states

Extra facts, not categories: ``logical_slots`` is the sum over live sequences of their own
token states (a shared slot counts once per sequence holding it), so ``logical_slots -
token_states`` is what sharing saved; it equals ``token_states`` when nothing is shared.

Lengths. vLLM never computes the KV of the last sampled token (the request stops when it is
sampled), so a request with prompt ``P`` and true output ``O`` writes ``P + O - 1`` slots
(``P`` when ``O == 0``). Its true output is ``final_output_len`` capped by ``max_tokens`` and
by ``max_model_len - P``; a request without ``final_output_len`` runs to ``max_tokens``.

The helpers here are shared by every manager; each returns plain ints so that a manager can
keep running totals and recompute them from scratch in ``check_invariants``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from allocator.request import Request


def true_output_len(request: Request, max_model_len: int) -> int:
    """Output tokens the request will really produce before it stops.

    Args:
        request: reads ``final_output_len`` (None: run to ``max_tokens``), ``max_tokens`` and
            ``num_prompt_tokens``.
        max_model_len: vLLM stops a request whose length reaches it.
    """
    wanted = request.max_tokens
    if request.final_output_len is not None:
        wanted = min(wanted, request.final_output_len)
    return max(0, min(wanted, max_model_len - request.num_prompt_tokens))


def final_kv_slots(request: Request, max_model_len: int) -> int:
    """KV slots the request will have written when it finishes (see the module docstring)."""
    output = true_output_len(request, max_model_len)
    return request.num_prompt_tokens + max(output, 1) - 1


def split_held(held: int, written: int, will_write: int) -> tuple[int, int, int]:
    """Classify one holding of ``held`` slots into (token_states, reserved, internal_frag).

    Args:
        held: slots the holder owns (a region, or blocks x block_size).
        written: slots of the holding that hold computed tokens, ``0 <= written <= held``.
        will_write: slots of the holding that will have been written when the request
            finishes; capped at ``held`` here, and ignored where below ``written``.

    Returns:
        ``(token_states, reserved, internal_frag)``, summing to ``held``.
    """
    if not 0 <= written <= held:
        raise ValueError(f"written slots {written} outside the holding of {held}")
    reserved = max(0, min(will_write, held) - written)
    return written, reserved, held - written - reserved


def split_free(num_free: int, cached_evictable: int, largest_free_region: int) -> tuple[int, int, int]:
    """Classify free slots into (cached_evictable, external_frag, free).

    Args:
        num_free: every slot no request holds.
        cached_evictable: of those, slots still holding a cached block (paged only).
        largest_free_region: the longest run of adjacent free slots, for a contiguous
            arena; pass ``num_free - cached_evictable`` for paged managers (any
            free block will do, so there is no external fragmentation).
    """
    rest = num_free - cached_evictable
    if cached_evictable < 0 or rest < 0 or not 0 <= largest_free_region <= rest:
        raise ValueError(
            f"inconsistent free space: num_free={num_free}, cached={cached_evictable}, "
            f"largest={largest_free_region}"
        )
    return cached_evictable, rest - largest_free_region, largest_free_region
