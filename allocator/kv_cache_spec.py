"""What one KV-cache group looks like: its attention type, block size and pool size.

vLLM derives these from the model and GPU memory (``KVCacheConfig`` with tensors and layer
groups). pagedsim models a single group, so the config shrinks to three numbers: how many blocks,
how many tokens per block, and an optional sliding window that selects the manager type.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FullAttentionSpec:
    """Full (causal) attention: every token's KV stays until the request is freed."""

    block_size: int

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")


@dataclass(frozen=True, slots=True)
class SlidingWindowSpec:
    """Sliding-window attention: a token attends to itself and the ``sliding_window - 1`` before."""

    block_size: int
    sliding_window: int

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.sliding_window < 1:
            raise ValueError(f"sliding_window must be >= 1, got {self.sliding_window}")


KVCacheSpec = FullAttentionSpec | SlidingWindowSpec


@dataclass(frozen=True, slots=True)
class KVCacheConfig:
    """One KV-cache group of ``num_blocks`` blocks (block 0 is the null block).

    Args:
        num_blocks: blocks in the pool, including the null block; at least 1.
        block_size: tokens per block; at least 1.
        sliding_window: window in tokens for sliding-window attention; None for full attention.
    """

    num_blocks: int
    block_size: int
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        if self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks}")
        _ = self.kv_cache_spec  # validates block_size and sliding_window

    @property
    def kv_cache_spec(self) -> KVCacheSpec:
        """The group's spec: sliding window if ``sliding_window`` is set, else full attention."""
        if self.sliding_window is None:
            return FullAttentionSpec(self.block_size)
        return SlidingWindowSpec(self.block_size, self.sliding_window)
