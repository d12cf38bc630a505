"""A seeded op stream for the paged allocator and its recorded outcome (golden replay).

A miniature vLLM scheduler (token budget, chunked prefill, FCFS preemption of the newest
running request) drives a KVCacheManager over a few hundred requests with shared prefixes.
Every block id handed out, every hit length, every preemption and the final free-queue order
are logged. ``allocator_replay.json`` holds the log produced by the first, unoptimised
implementation; regenerate it only on a deliberate semantic change:

    PYTHONPATH=. python -m tests.golden.allocator_replay --write
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocator import KVCacheConfig, KVCacheManager, Request
from allocator.hashing import get_request_block_hasher, init_none_hash, sha256

GOLDEN_PATH = Path(__file__).with_name("allocator_replay.json")


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """One replayed scenario."""

    name: str
    enable_caching: bool
    sliding_window: int | None = None
    num_blocks: int = 40
    block_size: int = 4
    num_requests: int = 200
    token_budget: int = 48
    max_running: int = 16
    num_lookahead_tokens: int = 0
    seed: int = 0


CONFIGS = (
    ReplayConfig("full_caching", enable_caching=True),
    ReplayConfig("full_no_caching", enable_caching=False),
    ReplayConfig("full_caching_lookahead", enable_caching=True, num_lookahead_tokens=2, seed=1),
    ReplayConfig("sliding_window_caching", enable_caching=True, sliding_window=10, seed=2),
    ReplayConfig("sliding_window_no_caching", enable_caching=False, sliding_window=10, seed=3),
)


def make_requests(config: ReplayConfig) -> list[tuple[Request, int]]:
    """Requests with prompts drawn from a few shared prefixes and a 3-token alphabet."""
    rng = random.Random(config.seed)
    prefixes = [[rng.randrange(3) for _ in range(rng.randrange(4, 24))] for _ in range(4)]
    hasher = get_request_block_hasher(config.block_size, sha256)
    requests = []
    for i in range(config.num_requests):
        prompt = list(rng.choice(prefixes)) if rng.random() < 0.7 else []
        prompt += [rng.randrange(3) for _ in range(rng.randrange(1, 20))]
        output_len = rng.randrange(1, 24)
        request = Request(f"r{i}", prompt, max_tokens=output_len, block_hasher=hasher)
        requests.append((request, output_len))
    return requests


def replay(config: ReplayConfig, manager_class: type[KVCacheManager] = KVCacheManager) -> dict[str, Any]:
    """Run the stream through ``manager_class`` (a KVCacheManager) and return its log."""
    kv_config = KVCacheConfig(config.num_blocks, config.block_size, config.sliding_window)
    manager = manager_class(
        kv_config, max_model_len=1024, enable_caching=config.enable_caching, log_stats=True
    )
    rng = random.Random(config.seed + 100)
    pending = deque(make_requests(config))
    waiting: deque[Request] = deque()
    output_len: dict[str, int] = {}
    running: list[Request] = []
    log: list[list[Any]] = []
    step = 0
    while pending or waiting or running:
        for _ in range(rng.randrange(0, 3)):
            if pending:
                request, length = pending.popleft()
                output_len[request.request_id] = length
                waiting.append(request)
        scheduled = _schedule(manager, config, running, waiting, log)
        for request, num_tokens in scheduled:
            request.num_computed_tokens += num_tokens
        _update_outputs(manager, running, output_len, rng, log)
        if running:
            common = manager.get_num_common_prefix_blocks(running[0].request_id)
            log.append(["common", step, common[0]])
        if step % 50 == 0:
            _poke_cache(manager, rng, log, step)
        manager.check_invariants()
        step += 1
    free_queue = manager.block_pool.free_block_queue.get_all_free_blocks()
    stats = manager.make_prefix_cache_stats()
    assert stats is not None
    return {
        "log": log,
        "final_free_queue": [block.block_id for block in free_queue],
        "stats": [
            stats.requests,
            stats.queries,
            stats.hits,
            stats.preempted_requests,
            stats.preempted_queries,
            stats.preempted_hits,
        ],
    }


def _schedule(
    manager: KVCacheManager,
    config: ReplayConfig,
    running: list[Request],
    waiting: deque[Request],
    log: list[list[Any]],
) -> list[tuple[Request, int]]:
    budget = config.token_budget
    scheduled: list[tuple[Request, int]] = []
    preempted = False
    idx = 0
    while idx < len(running) and budget > 0:
        request = running[idx]
        num_new = min(request.num_tokens - request.num_computed_tokens, budget)
        while True:
            new_blocks = manager.allocate_slots(
                request, num_new, num_lookahead_tokens=config.num_lookahead_tokens
            )
            if new_blocks is not None:
                break
            victim = running.pop()
            manager.free(victim)
            victim.num_computed_tokens = 0
            victim.num_preemptions += 1
            waiting.appendleft(victim)
            preempted = True
            log.append(["preempt", victim.request_id])
            if victim is request:
                break
        if new_blocks is None:
            break
        log.append(["run", request.request_id, num_new, new_blocks.get_block_ids()[0]])
        scheduled.append((request, num_new))
        budget -= num_new
        idx += 1
    while not preempted and waiting and budget > 0 and len(running) < config.max_running:
        request = waiting[0]
        hit_blocks, num_hit = manager.get_computed_blocks(request)
        num_new = min(request.num_tokens - num_hit, budget)
        new_blocks = manager.allocate_slots(request, num_new, num_hit, hit_blocks)
        if new_blocks is None:
            log.append(["blocked", request.request_id])
            break
        waiting.popleft()
        running.append(request)
        request.num_computed_tokens = num_hit
        log.append(
            [
                "admit",
                request.request_id,
                num_hit,
                hit_blocks.get_block_ids()[0],
                new_blocks.get_block_ids()[0],
            ]
        )
        scheduled.append((request, num_new))
        budget -= num_new
    return scheduled


def _update_outputs(
    manager: KVCacheManager,
    running: list[Request],
    output_len: dict[str, int],
    rng: random.Random,
    log: list[list[Any]],
) -> None:
    for request in list(running):
        if request.num_computed_tokens < request.num_tokens:
            continue
        request.append_output_token_ids(rng.randrange(3))
        if request.num_output_tokens >= output_len[request.request_id]:
            running.remove(request)
            manager.free(request)
            log.append(["finish", request.request_id, manager.block_pool.get_num_free_blocks()])


def _poke_cache(
    manager: KVCacheManager, rng: random.Random, log: list[list[Any]], step: int
) -> None:
    evicted = sorted(rng.sample(range(manager.block_pool.num_gpu_blocks), 3))
    manager.evict_blocks(set(evicted))
    log.append(["evict", step, evicted, manager.reset_prefix_cache()])


def replay_all() -> dict[str, Any]:
    """Replay every scenario with a fixed first-block seed."""
    init_none_hash(sha256)
    return {config.name: replay(config) for config in CONFIGS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the golden JSON")
    args = parser.parse_args()
    result = replay_all()
    if args.write:
        tmp = GOLDEN_PATH.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, separators=(",", ":")) + "\n")
        os.replace(tmp, GOLDEN_PATH)
    for name, run in result.items():
        print(name, len(run["log"]), "events")


if __name__ == "__main__":
    main()
