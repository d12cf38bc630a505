"""Unit tests for allocator/admission.py and the admission gate of KVCacheManager (0.19+):
the full-sequence check, the watermark and the sliding-window admission cap."""

from __future__ import annotations

import pytest

from allocator.admission import admission_cap, watermark_blocks
from allocator.kv_cache_manager import KVCacheManager
from allocator.kv_cache_spec import KVCacheConfig
from allocator.profiles import profile_for
from allocator.request import Request, RequestStatus


def manager(version: str, num_blocks: int = 4, bs: int = 4, window: int | None = None,
            **kw: object) -> KVCacheManager:
    return KVCacheManager(KVCacheConfig(num_blocks, bs, window), 64, enable_caching=False,
                          vllm_profile=profile_for(version), **kw)  # type: ignore[arg-type]


def test_admission_cap_formula() -> None:
    """cdiv(min(window - 1 + tokens, max_model_len), bs) + 1 for sliding windows only."""
    swa = KVCacheConfig(8, 4, 5)
    assert admission_cap(swa, 64, 8, profile_for("0.33")) == 4       # cdiv(12, 4) + 1
    assert admission_cap(swa, 10, 8, profile_for("0.33")) == 4       # cdiv(10, 4) + 1
    assert admission_cap(swa, 64, None, profile_for("0.33")) == 17   # cdiv(64, 4) + 1
    assert admission_cap(swa, 64, 8, profile_for("0.19")) is None    # no cap before 0.20
    assert admission_cap(KVCacheConfig(8, 4), 64, 8, profile_for("0.33")) is None
    with pytest.raises(ValueError, match="max_in_flight_tokens"):
        admission_cap(swa, 64, 0, profile_for("0.33"))


def test_watermark_blocks() -> None:
    """int(watermark x num_blocks); out-of-range watermarks are refused."""
    assert watermark_blocks(0.1, KVCacheConfig(25, 4)) == 2
    with pytest.raises(ValueError, match="watermark"):
        watermark_blocks(1.0, KVCacheConfig(25, 4))


def test_can_fit_matches_allocate_slots_gate() -> None:
    """P7 through both APIs: the whole 16-token prompt needs 4 of 3 free blocks."""
    for version in ("0.19", "0.33"):
        kv = manager(version)
        request = Request("r", range(16), 4)
        assert not kv.can_fit_full_sequence(request)
        assert kv.allocate_slots(request, 4, full_sequence_must_fit=True) is None
        assert kv.block_pool.get_num_free_blocks() == 3
        assert kv.allocate_slots(request, 4) is not None  # no gate: first chunk only


def test_watermark_applies_to_waiting_requests_with_others_scheduled() -> None:
    """A 1-block admission into 2 free blocks fails with a 2-block watermark unless nothing
    else is scheduled or the request is running."""
    kv = manager("0.33", num_blocks=10, watermark=0.2)
    kv.allocate_slots(Request("a", range(28), 4), 28)
    waiting = Request("w", range(3), 4)
    assert kv.allocate_slots(waiting, 3, has_scheduled_reqs=True) is None
    assert kv.allocate_slots(waiting, 3, has_scheduled_reqs=False) is not None
    running = Request("x", range(3), 4)
    running.status = RequestStatus.RUNNING
    assert kv.allocate_slots(running, 3) is not None


def test_reserved_blocks() -> None:
    """reserved_blocks shrinks the free count the per-chunk check may use."""
    kv = manager("0.33", num_blocks=4)
    assert kv.allocate_slots(Request("r", range(8), 4), 8, reserved_blocks=2) is None
    assert kv.allocate_slots(Request("r", range(8), 4), 8, reserved_blocks=1) is not None


def test_swa_cap_binds_in_the_full_sequence_check_only() -> None:
    """A long sliding-window prompt passes the gate under the cap (0.21+), which 0.20 also
    applies to each chunk's check."""
    kv = manager("0.33", num_blocks=6, window=4, max_in_flight_tokens=4)
    request = Request("r", range(40), 4)
    assert kv.can_fit_full_sequence(request)   # cap cdiv(7, 4) + 1 = 3 <= 5 free
    assert not manager("0.33", num_blocks=6, window=4).can_fit_full_sequence(request)
    assert kv.single_type_manager.get_num_blocks_to_allocate("r", 40, [], 0) == 10
    old = manager("0.20", num_blocks=6, window=4, max_in_flight_tokens=4)
    assert old.single_type_manager.get_num_blocks_to_allocate("r", 40, [], 0) == 3
