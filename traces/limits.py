"""Largest values a trace may hold, so absurd input fails while loading, not mid-run.

A request's token ids are materialised when it is simulated (int32, plus hashing scratch),
so a prompt of 10^12 tokens is refused here rather than as a MemoryError later. The limits
sit far above any real workload: the longest model context today is about 10M tokens, and
a billion seconds is about 32 years of arrivals (float64 still resolves microseconds there).
"""
from __future__ import annotations

MAX_TOKENS = 1 << 24
"""Most prompt or output tokens of one request (16,777,216)."""
MAX_SAMPLES = 1 << 12
"""Largest n (parallel samples) or beam width of one request (4,096)."""
MAX_SPAN_S = 1e9
"""Longest time from the first arrival to the last, in seconds (about 32 years)."""
MIN_SPAN_S = 1e-9
"""A trace whose arrivals spread over time is not squeezed below a nanosecond."""
