"""Reservation policies of the contiguous baselines: how many slots a request sets aside.

The PagedAttention paper's Orca variants (section 6.1) reserve, for each request, Max: the
model's maximum length; Pow2: the prompt plus the true output rounded up to a power of two
(at most 2x over); Oracle: exactly prompt plus true output. FasterTransformer reserves like
Max. A policy is a plain function ``policy(request, max_model_len) -> slots``; the true output
comes from ``allocator.waste.true_output_len``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allocator.waste import true_output_len

if TYPE_CHECKING:
    from allocator.request import Request

ReservationPolicy = Callable[["Request", int], int]


def next_power_of_two(n: int) -> int:
    """``2^ceil(log2 n)`` for ``n >= 1`` (25 -> 32, 32 -> 32); 0 for ``n == 0``."""
    if n < 0:
        raise ValueError(f"next_power_of_two needs n >= 0, got {n}")
    return 0 if n == 0 else 1 << (n - 1).bit_length()


def reserve_max(request: Request, max_model_len: int) -> int:
    """Max: ``max_model_len`` slots whatever the request."""
    return max_model_len


def reserve_pow2(request: Request, max_model_len: int) -> int:
    """Pow2: ``prompt + 2^ceil(log2 output)``, capped at ``max_model_len``."""
    output = true_output_len(request, max_model_len)
    return min(request.num_prompt_tokens + next_power_of_two(output), max_model_len)


def reserve_oracle(request: Request, max_model_len: int) -> int:
    """Oracle: ``prompt + true output`` (one slot more than is written; see waste.py)."""
    return request.num_prompt_tokens + true_output_len(request, max_model_len)


RESERVATION_POLICIES: dict[str, ReservationPolicy] = {
    "max": reserve_max,
    "pow2": reserve_pow2,
    "oracle": reserve_oracle,
}


def get_policy(name: str) -> ReservationPolicy:
    """The policy called ``name`` ("max", "pow2" or "oracle").

    Raises:
        ValueError: unknown name.
    """
    try:
        return RESERVATION_POLICIES[name]
    except KeyError:
        known = ", ".join(RESERVATION_POLICIES)
        raise ValueError(f"unknown reservation policy {name!r}; expected one of {known}") from None
