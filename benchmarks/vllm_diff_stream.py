"""Seeded operation streams for ``vllm_diff.py``, and pagedsim's side of the executor.

An episode is a manager configuration (pool size, block size, optional sliding window, caching,
retention, watermark, admission-cap tokens) plus a few hundred operations drawn from a small
token alphabet with shared prefix families, so prefix hits, evictions, failed allocations and
preemptions are frequent. Operations name requests by slot (index into the sorted live set), so
any subsequence of a stream is still a valid stream: that is what makes shrinking work.
"""

from __future__ import annotations

import random
from typing import Any

from allocator.hashing import get_request_block_hasher, sha256
from allocator.kv_cache_manager import KVCacheManager
from allocator.kv_cache_spec import KVCacheConfig
from allocator.profiles import VllmProfile
from allocator.request import Request

MAX_MODEL_LEN = 64
PREFIXES = ([0, 1, 2, 3, 0, 1, 2, 3], [0, 1, 2, 3, 1, 1], [3, 3, 3, 3, 3, 3, 3, 3, 3, 3], [2], [])
OP_WEIGHTS = {
    "admit": 24, "step": 40, "resume": 8, "preempt": 4, "free": 10, "cache": 3,
    "evict": 4, "reset": 1, "prefix": 2, "zero": 2,
}


def episode_config(rng: random.Random, profile: VllmProfile) -> dict[str, Any]:
    """A random manager configuration that the profile's release can be built with."""
    block_size = rng.choice((1, 2, 2, 4, 4))
    window = None if rng.random() < 0.55 else rng.choice((1, 2, 3, 4, 5, 8))
    retention = profile.prefix_cache_retention_interval
    if window is not None and profile.swa_cache_mask == "mask" and _minor(profile) >= 30:
        retention = rng.choice((retention, None, 0, 2 * block_size))
    cap_tokens = None
    if window is not None and profile.swa_admission_cap != "none" and rng.random() < 0.5:
        cap_tokens = rng.randint(2, 12)
    watermark = 0.0
    if profile.watermark is not None and rng.random() < 0.3:
        watermark = rng.choice((0.05, 0.1, 0.2))
    return {
        "num_blocks": rng.randint(4, 36),
        "block_size": block_size,
        "sliding_window": window,
        "caching": rng.random() < 0.85,
        "max_model_len": MAX_MODEL_LEN,
        "retention": retention if window is not None else profile.prefix_cache_retention_interval,
        "watermark": watermark,
        "max_in_flight_tokens": cap_tokens,
    }


def _minor(profile: VllmProfile) -> int:
    return int(profile.version.split(".")[1])


def _request_fields(rng: random.Random, rid: str, reserve: bool) -> dict[str, Any]:
    tokens = list(rng.choice(PREFIXES)) + [rng.randrange(4) for _ in range(rng.randint(0, 10))]
    if not tokens:
        tokens = [rng.randrange(4)]
    salt = rng.choices((None, "", "s1", "s2"), weights=(14, 2, 2, 2))[0]
    lora = rng.choices((None, ["a", "/p/a"], ["b", "/p/b"]), weights=(16, 2, 2))[0]
    ext = rng.randint(1, 6) if rng.random() < 0.15 else 0
    return {
        "rid": rid, "tokens": tokens, "salt": salt, "lora": lora, "ext": ext,
        "chunk": rng.choice((1, 2, 3, 5, 8, 64, 64)), "lookahead": rng.choice((0, 0, 0, 1, 3)),
        "delay": rng.random() < (0.5 if ext else 0.05), "gate": rng.random() < 0.5,
        "reserved": rng.randint(1, 4) if reserve and rng.random() < 0.15 else 0,
    }


def make_ops(rng: random.Random, num_ops: int, first_rid: int = 0,
             reserve: bool = False) -> list[dict[str, Any]]:
    """``num_ops`` random operations (request ids numbered from ``first_rid``); ``reserve``:
    admissions may pass ``reserved_blocks`` (an ``allocate_slots`` argument from 0.23)."""
    names, weights = list(OP_WEIGHTS), list(OP_WEIGHTS.values())
    ops = []
    for i in range(num_ops):
        kind = rng.choices(names, weights)[0]
        op: dict[str, Any] = {"op": kind, "slot": rng.randrange(64)}
        if kind in ("admit", "zero"):
            op.update(_request_fields(rng, f"r{first_rid + i}", reserve))
        elif kind == "step":
            op.update(token=rng.randrange(4), chunk=rng.choice((1, 1, 2, 4, 64)),
                      lookahead=rng.choice((0, 0, 0, 1, 2)))
        elif kind == "resume":
            op.update(chunk=rng.choice((1, 2, 5, 64, 64)), gate=rng.random() < 0.5,
                      lookahead=0, ext=0)
        elif kind == "evict":
            op["ids"] = rng.sample(range(40), rng.randint(1, 3))
        ops.append(op)
    return ops


def make_episodes(seed: int, num_ops: int, profile: VllmProfile,
                  ops_per_episode: int = 300) -> list[dict[str, Any]]:
    """The seeded stream: episodes of ``ops_per_episode`` operations, ``num_ops`` in all."""
    rng = random.Random(seed)
    episodes = []
    done = 0
    while done < num_ops:
        count = min(ops_per_episode, num_ops - done)
        episodes.append({"config": episode_config(rng, profile),
                         "ops": make_ops(rng, count, first_rid=done,
                                         reserve=_minor(profile) >= 23)})
        done += count
    return episodes


class PagedsimBackend:
    """pagedsim's ``KVCacheManager`` and ``Request`` under one profile."""

    def __init__(self, profile: VllmProfile) -> None:
        self.profile = profile
        self.full_sequence_api = profile.full_sequence_check
        self.hasher: Any = None

    def make_manager(self, config: dict[str, Any]) -> KVCacheManager:
        profile = self.profile.replace(prefix_cache_retention_interval=config["retention"])
        kv_config = KVCacheConfig(config["num_blocks"], config["block_size"],
                                  config["sliding_window"])
        self.hasher = (get_request_block_hasher(config["block_size"], sha256, profile.extra_keys)
                       if config["caching"] else None)
        return KVCacheManager(
            kv_config, config["max_model_len"], enable_caching=config["caching"],
            vllm_profile=profile, watermark=config["watermark"],
            max_in_flight_tokens=config["max_in_flight_tokens"],
        )

    def make_request(self, rid: str, tokens: list[int], spec: dict[str, Any]) -> Request:
        lora = spec.get("lora")
        return Request(rid, tokens, max_tokens=1000, cache_salt=spec.get("salt"),
                       lora_name=lora[0] if lora else None, lora_path=lora[1] if lora else None,
                       block_hasher=self.hasher)

    def computed_blocks(self, manager: Any, request: Any) -> tuple[Any, int]:
        return manager.get_computed_blocks(request)  # type: ignore[no-any-return]

    def set_status(self, request: Any, status: str) -> None:
        request.status = status

    def allocate(self, manager: Any, request: Any, args: dict[str, Any]) -> Any:
        return manager.allocate_slots(request, **args)
