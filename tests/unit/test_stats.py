"""Unit tests for allocator/stats.py: prefix-cache counters and the recent hit rate."""

from __future__ import annotations

import pytest

from allocator.stats import CachingMetrics, PrefixCacheStats


def test_record_splits_preempted() -> None:
    """record adds to requests/queries/hits, or to the preempted_* fields."""
    stats = PrefixCacheStats()
    stats.record(num_tokens=10, num_hits=4, preempted=False)
    stats.record(num_tokens=7, num_hits=7, preempted=True)
    assert (stats.requests, stats.queries, stats.hits) == (1, 10, 4)
    assert (stats.preempted_requests, stats.preempted_queries, stats.preempted_hits) == (1, 7, 7)


def test_caching_metrics_window_and_reset() -> None:
    """The hit rate covers about the last N requests, keeps the newest, and resets on demand."""
    metrics = CachingMetrics(max_recent_requests=2)
    assert metrics.empty and metrics.hit_rate == 0.0
    metrics.observe(PrefixCacheStats(requests=1, queries=10, hits=5))
    metrics.observe(PrefixCacheStats(requests=0, queries=99, hits=99))
    metrics.observe(PrefixCacheStats(requests=1, queries=10, hits=10))
    assert metrics.hit_rate == pytest.approx(0.75)
    metrics.observe(PrefixCacheStats(requests=3, queries=10, hits=0))
    assert metrics.aggregated_requests == 3 and metrics.hit_rate == 0.0
    metrics.observe(PrefixCacheStats(reset=True, requests=1, queries=4, hits=1))
    assert metrics.aggregated_requests == 1 and metrics.hit_rate == pytest.approx(0.25)
