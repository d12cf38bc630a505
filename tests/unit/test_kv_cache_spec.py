"""Unit tests for allocator/kv_cache_spec.py: the one-group configuration."""

from __future__ import annotations

import dataclasses

import pytest

from allocator.kv_cache_spec import FullAttentionSpec, KVCacheConfig, SlidingWindowSpec


def test_spec_follows_sliding_window() -> None:
    """No window gives a full-attention spec; a window gives a sliding-window spec."""
    assert KVCacheConfig(8, 16).kv_cache_spec == FullAttentionSpec(16)
    assert KVCacheConfig(8, 16, 64).kv_cache_spec == SlidingWindowSpec(16, 64)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: KVCacheConfig(0, 16), "num_blocks must be >= 1, got 0"),
        (lambda: KVCacheConfig(4, 0), "block_size must be >= 1, got 0"),
        (lambda: KVCacheConfig(4, 16, -2), "sliding_window must be >= 1, got -2"),
        (lambda: FullAttentionSpec(-1), "block_size"),
    ],
)
def test_validation_names_value(make, match: str) -> None:
    """Bad sizes raise ValueError naming the field and value."""
    with pytest.raises(ValueError, match=match):
        make()


def test_frozen() -> None:
    """Configs are immutable values."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        KVCacheConfig(4, 16).num_blocks = 5  # type: ignore[misc]
