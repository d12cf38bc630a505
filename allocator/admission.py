"""The numbers behind vLLM's admission gate (0.19+): the watermark and the sliding-window cap.

From 0.19 the scheduler admits a waiting request only if its whole prompt fits
(``KVCacheManager.can_fit_full_sequence``, from 0.21 ``allocate_slots(full_sequence_must_fit=
True)``). A sliding-window request never holds more than its window plus the tokens in flight,
so from 0.20 its required count is capped; from 0.24 a watermark of free blocks is kept back
when a waiting request is admitted while others run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from allocator.block import KVCacheBlock
from allocator.kv_cache_spec import KVCacheConfig, SlidingWindowSpec
from allocator.profiles import VllmProfile
from allocator.request import Request, RequestStatus

if TYPE_CHECKING:
    from allocator.block_pool import BlockPool
    from allocator.single_type_manager import SingleTypeKVCacheManager

_WAITING_STATES = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


def admission_cap(
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
    max_in_flight_tokens: int | None,
    profile: VllmProfile,
) -> int | None:
    """``max_admission_blocks_per_request`` of a sliding-window group, else None.

    ``cdiv(min(sliding_window - 1 + max_in_flight_tokens, max_model_len), bs) + 1``: the +1
    because the window need not start at a block boundary. ``max_in_flight_tokens`` is
    ``max_num_batched_tokens`` for 0.20-0.25 profiles and max concurrent batches x
    ``max_num_batched_tokens`` from 0.26 (``VllmProfile.swa_admission_cap_tokens``); None
    stands for ``max_model_len``, so the cap never binds (vLLM's own default).

    Raises:
        ValueError: if ``max_in_flight_tokens`` < 1.
    """
    spec = kv_cache_config.kv_cache_spec
    if profile.swa_admission_cap == "none" or not isinstance(spec, SlidingWindowSpec):
        return None
    if max_in_flight_tokens is None:
        max_in_flight_tokens = max_model_len
    if max_in_flight_tokens < 1:
        raise ValueError(f"max_in_flight_tokens must be >= 1, got {max_in_flight_tokens}")
    num_tokens = min(spec.sliding_window - 1 + max_in_flight_tokens, max_model_len)
    return -(num_tokens // -spec.block_size) + 1


def watermark_blocks(watermark: float, kv_cache_config: KVCacheConfig) -> int:
    """Blocks kept free when admitting a waiting request: ``int(watermark x num_blocks)``.

    Raises:
        ValueError: for a watermark outside [0, 1).
    """
    if not 0.0 <= watermark < 1.0:
        raise ValueError(f"watermark must be in [0, 1), got {watermark}")
    return int(watermark * kv_cache_config.num_blocks)


def watermark_for(num_watermark_blocks: int, request: Request, has_scheduled_reqs: bool) -> int:
    """The watermark blocks a call must leave free: for waiting or preempted requests
    (``request.status``) while other requests are scheduled this step, else 0."""
    if has_scheduled_reqs and request.status in _WAITING_STATES:
        return num_watermark_blocks
    return 0


def check_new_tokens(
    request: Request, num_new_tokens: int, num_new_computed_tokens: int, num_ext: int,
    adopt_zero_tokens: bool,
) -> None:
    """Raise unless the call computes, receives or (0.31+, ``zero_token_adopt``) adopts tokens.

    Raises:
        ValueError: naming the request and ``num_new_tokens``.
    """
    adopts = adopt_zero_tokens and num_new_computed_tokens > 0
    if num_new_tokens < 0 or (num_new_tokens == 0 and num_ext == 0 and not adopts):
        raise ValueError(
            f"request {request.request_id!r}: num_new_tokens must be > 0 when there are "
            f"no external computed tokens, got {num_new_tokens}"
        )


def full_sequence_fits(
    single_type_manager: SingleTypeKVCacheManager,
    block_pool: BlockPool,
    max_model_len: int,
    request: Request,
    hit_blocks: Sequence[KVCacheBlock],
    total_computed_tokens: int,
    reserve: int,
) -> bool:
    """Whether ``min(num_tokens, max_model_len)`` tokens fit with ``reserve`` blocks to spare.

    Hits still in the free queue count as in ``allocate_slots``; sliding-window skipping and
    the admission cap (``apply_admission_cap``) lower the count. Changes nothing.
    """
    full_num_tokens = min(request.num_tokens, max_model_len)
    num_blocks = single_type_manager.get_num_blocks_to_allocate(
        request.request_id,
        full_num_tokens,
        hit_blocks,
        total_computed_tokens,
        apply_admission_cap=True,
    )
    return num_blocks + reserve <= block_pool.get_num_free_blocks()
