"""Prefix-cache statistics (vLLM v0.14 ``PrefixCacheStats`` and ``CachingMetrics``).

The manager records one query per prefix lookup, in tokens: how many the request had and how
many were hits. Lookups by requests that were preempted before are counted apart, since their
hits are mostly their own blocks coming back rather than sharing between requests.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(slots=True)
class PrefixCacheStats:
    """Counters since the last :meth:`KVCacheManager.make_prefix_cache_stats` call."""

    reset: bool = False
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        """Add one lookup of ``num_tokens`` tokens that hit ``num_hits`` of them."""
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.requests += 1
            self.queries += num_tokens
            self.hits += num_hits


class CachingMetrics:
    """Hit rate over roughly the last ``max_recent_requests`` requests."""

    def __init__(self, max_recent_requests: int = 1000) -> None:
        self.max_recent_requests = max_recent_requests
        self.aggregated_requests = 0
        self.aggregated_query_total = 0
        self.aggregated_query_hit = 0
        self.query_queue: deque[tuple[int, int, int]] = deque()

    def observe(self, stats: PrefixCacheStats) -> None:
        """Fold in one batch of stats; a reset batch clears the history first."""
        if stats.reset:
            self.reset()
        if stats.requests == 0:
            return
        self.query_queue.append((stats.requests, stats.queries, stats.hits))
        self.aggregated_requests += stats.requests
        self.aggregated_query_total += stats.queries
        self.aggregated_query_hit += stats.hits
        # Keep at least the newest entry even if it alone exceeds the window.
        while len(self.query_queue) > 1 and self.aggregated_requests > self.max_recent_requests:
            old_requests, old_queries, old_hits = self.query_queue.popleft()
            self.aggregated_requests -= old_requests
            self.aggregated_query_total -= old_queries
            self.aggregated_query_hit -= old_hits

    def reset(self) -> None:
        """Forget everything observed."""
        self.aggregated_requests = 0
        self.aggregated_query_total = 0
        self.aggregated_query_hit = 0
        self.query_queue.clear()

    @property
    def empty(self) -> bool:
        """True when nothing has been observed since the last reset."""
        return self.aggregated_requests == 0

    @property
    def hit_rate(self) -> float:
        """Hit tokens over queried tokens in the window, 0.0 when empty."""
        if self.aggregated_query_total == 0:
            return 0.0
        return self.aggregated_query_hit / self.aggregated_query_total
