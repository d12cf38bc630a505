"""pagedsim's allocator: an exact pure-Python port of vLLM's KV-cache block management.

vLLM 0.14 by default; every minor release up to 0.33 through ``profile_for(version)``.

The package imports only the standard library. ``BlockTable`` (slot mapping for kernels) needs
numpy and is loaded lazily on first access, so ``import allocator`` stays numpy-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from allocator.block import BlockId, KVCacheBlock
from allocator.block_hash_map import BlockHashToBlockMap
from allocator.block_pool import BlockPool
from allocator.free_queue import FreeKVCacheBlockQueue
from allocator.hashing import (
    BlockHash,
    BlockHashWithGroupId,
    get_hash_fn_by_name,
    get_request_block_hasher,
    hash_block_tokens,
    init_none_hash,
    sha256,
    sha256_cbor,
)
from allocator.kv_cache_blocks import KVCacheBlocks
from allocator.kv_cache_manager import KVCacheManager
from allocator.kv_cache_spec import FullAttentionSpec, KVCacheConfig, SlidingWindowSpec
from allocator.profiles import VllmProfile, apply_overrides, profile_for
from allocator.request import Request
from allocator.single_type_manager import FullAttentionManager, SingleTypeKVCacheManager
from allocator.sliding_window_manager import SlidingWindowManager
from allocator.stats import CachingMetrics, PrefixCacheStats

if TYPE_CHECKING:
    from allocator.block_table import BlockTable as BlockTable

# BlockTable is left out of __all__ so that "from allocator import *" stays numpy-free.
__all__ = [
    "BlockHash",
    "BlockHashToBlockMap",
    "BlockHashWithGroupId",
    "BlockId",
    "BlockPool",
    "CachingMetrics",
    "FreeKVCacheBlockQueue",
    "FullAttentionManager",
    "FullAttentionSpec",
    "KVCacheBlock",
    "KVCacheBlocks",
    "KVCacheConfig",
    "KVCacheManager",
    "PrefixCacheStats",
    "Request",
    "SingleTypeKVCacheManager",
    "SlidingWindowManager",
    "SlidingWindowSpec",
    "VllmProfile",
    "apply_overrides",
    "get_hash_fn_by_name",
    "get_request_block_hasher",
    "hash_block_tokens",
    "init_none_hash",
    "profile_for",
    "sha256",
    "sha256_cbor",
]


def __getattr__(name: str) -> Any:
    if name == "BlockTable":
        from allocator.block_table import BlockTable

        return BlockTable
    raise AttributeError(f"module 'allocator' has no attribute {name!r}")
