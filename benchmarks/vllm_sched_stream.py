"""Seeded arrival streams for ``vllm_diff.py --scheduler``, shared by both sides (stdlib only).

A stream is a scheduler configuration (block size 16, a pool small enough to preempt, seats,
budget, model length, chunked prefill and prefix caching on or off, policy, speculative tokens
and method, async) and requests: id, arrival step, priority, prompt ids over shared prefix families (so
prefix hits happen), a fixed output length (EOS ignored) and the tokens the fake model samples.
Accepted draft counts are a pure function of seed, request and output count (both sides agree).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

BLOCK_SIZE = 16
VOCAB = 50
MAX_MODEL_LEN = 1024
SHORT_MODEL_LEN = 160
"""A model length some prompts plus outputs exceed (their outputs stop there)."""


def make_stream(seed: int, num_steps: int, *, policy: str = "fcfs", spec: int = 0,
                spec_method: str = "ngram", async_scheduling: bool = False) -> dict[str, Any]:
    """A stream of arrivals over roughly ``num_steps`` steps (see the module docstring)."""
    rng = random.Random(f"sched:{seed}")
    max_model_len = rng.choice((MAX_MODEL_LEN, MAX_MODEL_LEN, SHORT_MODEL_LEN))
    chunked = rng.random() < 0.85
    config = {
        "seed": seed,
        "block_size": BLOCK_SIZE,
        "num_blocks": rng.choice((24, 32, 40, 48)),
        "max_num_seqs": rng.choice((4, 6, 8)),
        "max_num_batched_tokens": (rng.choice((64, 96, 128)) if chunked
                                   else max(max_model_len, 256)),
        "max_model_len": max_model_len,
        "chunked_prefill": chunked,
        "prefix_caching": rng.random() < 0.8,
        "policy": policy,
        "spec": spec,
        "spec_method": spec_method,
        "async": async_scheduling,
        "num_steps": num_steps,
    }
    families = [[rng.randrange(VOCAB) for _ in range(rng.choice((16, 32, 40)))]
                for _ in range(4)]
    requests = []
    step = 0
    index = 0
    while step < num_steps * 0.7:
        step += rng.choice((0, 0, 1, 2, 3, 5))
        prefix = rng.choice(families) if rng.random() < 0.6 else []
        prompt = prefix + [rng.randrange(VOCAB) for _ in range(rng.randint(1, 90))]
        max_tokens = rng.randint(1, 60)
        requests.append({
            "id": f"r{index}",
            "arrival": step,
            "priority": rng.randint(0, 3),
            "prompt": prompt,
            "max_tokens": max_tokens,
            "outputs": [rng.randrange(VOCAB) for _ in range(max_tokens + spec + 1)],
        })
        index += 1
    return {"config": config, "requests": requests}


def accepted_drafts(seed: int, request_id: str, num_out: int, num_drafts: int) -> int:
    """Draft tokens accepted at this step of a request (0 .. num_drafts), seeded."""
    if num_drafts <= 0:
        return 0
    digest = hashlib.blake2b(f"{seed}:{request_id}:{num_out}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") % (num_drafts + 1)


def empty_record() -> dict[str, Any]:
    """One step's record: scheduled tokens, admissions, preemptions, finishes, block ids."""
    return {"scheduled": [], "admitted": [], "preempted": [], "finished": [], "blocks": {}}
