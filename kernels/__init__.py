"""pagedsim kernels: Triton kernels that run attention directly on a paged KV cache.

Cache layout: separate K and V tensors `[num_blocks, block_size, num_kv_heads, head_size]`
(vLLM's flash layout) in the model dtype or fp8 e4m3 with per-tensor scales; block tables come
from the allocator as `list[list[int]]` or int32 tensors. Each kernel lives in its own module
with a thin checking wrapper; kernels/reference.py holds the torch references, README.md the
map. Importing this package loads neither torch nor triton: the public names below are
resolved on first use, so the rest of pagedsim runs without them.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "reshape_and_cache": "kernels.reshape_and_cache",
    "paged_decode_attention": "kernels.decode_attention",
    "DecodeConfig": "kernels.decode_config",
    "choose_num_splits": "kernels.decode_config",
    "paged_prefill_attention": "kernels.prefill_attention",
    "paged_attention": "kernels.attention",
    "AttentionTimer": "kernels.layer_timing",
    "PrefillConfig": "kernels.prefill_attention",
    "copy_blocks": "kernels.copy_blocks",
    "compute_slot_mapping": "kernels.slot_mapping",
    "swap_blocks": "kernels.swap",
    "swap_kv": "kernels.swap",
    "allocate_cpu_cache": "kernels.swap",
}

__all__ = [
    "AttentionTimer",
    "DecodeConfig",
    "PrefillConfig",
    "allocate_cpu_cache",
    "choose_num_splits",
    "compute_slot_mapping",
    "copy_blocks",
    "paged_attention",
    "paged_decode_attention",
    "paged_prefill_attention",
    "reshape_and_cache",
    "swap_blocks",
    "swap_kv",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
