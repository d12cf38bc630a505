"""vLLM's side of ``vllm_diff.py``: runs in vLLM's own interpreter, speaks JSON lines.

Each input line is ``{"config": {...}, "ops": [...]}`` (one episode); the reply line is the
list of observations from :class:`vllm_diff_ops.Executor` over vLLM's ``KVCacheManager`` and
``Request`` (any release 0.14 ... 0.33: constructor and call signatures are inspected, so new
arguments are passed only where they exist). The first reply is ``{"vllm": version}``.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import vllm
from vllm.lora.request import LoRARequest
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request, RequestStatus
from vllm_diff_ops import Executor


def _params(func: Any) -> set[str]:
    return set(inspect.signature(func).parameters)


class VllmBackend:
    """Builds vLLM objects for the executor, adapting to the release's signatures."""

    def __init__(self) -> None:
        self.manager_params = _params(KVCacheManager.__init__)
        self.request_params = _params(Request.__init__)
        self.alloc_params = _params(KVCacheManager.allocate_slots)
        self.config_params = _params(KVCacheConfig.__init__)
        if "full_sequence_must_fit" in self.alloc_params:
            self.full_sequence_api = "allocate_slots"
        elif hasattr(KVCacheManager, "can_fit_full_sequence"):
            self.full_sequence_api = "can_fit_full_sequence"
        else:
            self.full_sequence_api = "none"
        self.hasher: Any = None

    def make_manager(self, config: dict[str, Any]) -> Any:
        bs, window = config["block_size"], config["sliding_window"]
        common = {"block_size": bs, "num_kv_heads": 1, "head_size": 8, "dtype": torch.float16}
        spec = (FullAttentionSpec(**common) if window is None
                else SlidingWindowSpec(sliding_window=window, **common))
        extra = {}
        if "prefix_cache_retention_interval" in self.config_params:
            extra["prefix_cache_retention_interval"] = config["retention"]
        kv_config = KVCacheConfig(config["num_blocks"], [], [KVCacheGroupSpec(["l0"], spec)],
                                  **extra)
        kwargs: dict[str, Any] = {"enable_caching": config["caching"]}
        if "scheduler_block_size" in self.manager_params:
            kwargs["scheduler_block_size"] = bs
        for name in ("max_in_flight_tokens", "max_num_batched_tokens"):
            if name in self.manager_params:
                kwargs[name] = config["max_in_flight_tokens"]
        if "watermark" in self.manager_params:
            kwargs["watermark"] = config["watermark"]
        self.hasher = kv_cache_utils.get_request_block_hasher(bs, sha256)
        return KVCacheManager(kv_config, config["max_model_len"], hash_block_size=bs, **kwargs)

    def make_request(self, rid: str, tokens: list[int], spec: dict[str, Any]) -> Any:
        kwargs: dict[str, Any] = {
            "request_id": rid,
            "prompt_token_ids": list(tokens),
            "sampling_params": SamplingParams(max_tokens=1000),
            "pooling_params": None,
            "cache_salt": spec.get("salt"),
            "block_hasher": self.hasher if self.manager_caching else None,
        }
        if "eos_token_id" in self.request_params:
            kwargs["eos_token_id"] = None
        if spec.get("lora"):
            name, path = spec["lora"]
            kwargs["lora_request"] = LoRARequest(name, 1 + ord(name[0]), path)
        return Request(**kwargs)

    manager_caching = True

    def computed_blocks(self, manager: Any, request: Any) -> tuple[Any, int]:
        result = manager.get_computed_blocks(request)
        return result[0], result[1]

    def set_status(self, request: Any, status: str) -> None:
        request.status = getattr(RequestStatus, status)

    def allocate(self, manager: Any, request: Any, args: dict[str, Any]) -> Any:
        return manager.allocate_slots(
            request, **{k: v for k, v in args.items() if k in self.alloc_params}
        )


def main() -> None:
    backend = VllmBackend()
    kv_cache_utils.init_none_hash(sha256)
    print(json.dumps({"vllm": vllm.__version__, "seed": os.environ.get("PYTHONHASHSEED"),
                      "full_sequence_api": backend.full_sequence_api}), flush=True)
    for line in sys.stdin:
        episode = json.loads(line)
        backend.manager_caching = episode["config"]["caching"]
        executor = Executor(backend, episode["config"])
        print(json.dumps(executor.run(episode["ops"])), flush=True)


if __name__ == "__main__":
    main()
