"""Rejected and truncated requests: counts, causes and the option that would admit them.

From each allocator's request table (``requests.parquet``'s columns) this module counts the
requests rejected for each cause (``prompt_too_long``: prompt of ``max_model_len`` tokens or
more; ``exceeds_pool``: more KV than the whole pool; ``unschedulable``: still waiting when the
trace ended) and those whose output was truncated to fit ``max_model_len``. Each cause becomes
one entry of summary.json's ``warnings`` and one warning line on stderr, naming the option
that would admit the requests (e.g. ``--max-model-len 16384``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sim.config import RunConfig
from sim.cost.models import PRESETS

CAUSES = {
    "prompt_too_long": ("rejected", "prompt of max_model_len ({mml}) tokens or more"),
    "exceeds_pool": ("rejected", "more KV cache than the whole pool ({slots} token slots)"),
    "unschedulable": ("rejected", "could not be scheduled before the trace ended"),
    "truncated": ("truncated", "prompt + output over max_model_len ({mml}), output cut"),
}
"""cause -> (what happened, why; formatted with the run's max_model_len and pool size)."""


def _pow2(value: int) -> int:
    return 1 << max(0, int(value) - 1).bit_length()


def _length_fix(config: RunConfig, needed: int) -> str:
    """The options that give sequences of ``needed`` tokens room."""
    length = _pow2(needed)
    if length <= config.model.max_context_len:
        return f"--max-model-len {length}"
    longer = [m for m in PRESETS.values() if m.max_context_len >= length]
    if not longer:
        return f"a model with a context of {length} tokens or more (no preset has one)"
    return f"--model {longer[0].name.lower()} --max-model-len {length}"


def _fix(cause: str, config: RunConfig, needed: int) -> str:
    if cause in ("prompt_too_long", "truncated"):
        return _length_fix(config, needed)
    if cause == "exceeds_pool":
        blocks = -(-needed // config.cache.block_size) + 1
        return f"--num-gpu-blocks {blocks} (or a GPU with more memory)"
    return ("a larger pool (--num-gpu-blocks, --gpu-memory-utilization) or a smaller "
            "--max-model-len")


def _counts(table: Any) -> dict[str, tuple[int, int]]:
    """cause -> (requests, tokens the longest of them needs) in one allocator's table."""
    reason = np.array(table.column("rejection_reason").to_pylist(), dtype=object)
    prompt = np.asarray(table.column("prompt_tokens").to_numpy(), dtype=np.int64)
    wanted = np.asarray(table.column("trace_output_tokens").to_numpy(), dtype=np.int64)
    output = np.asarray(table.column("output_tokens").to_numpy(), dtype=np.int64)
    truncated = np.asarray(table.column("truncated").to_numpy(zero_copy_only=False), dtype=bool)
    found: dict[str, tuple[int, int]] = {}
    for cause in ("prompt_too_long", "exceeds_pool", "unschedulable"):
        rows = reason == cause
        if rows.any():
            need = prompt[rows] + (1 if cause == "prompt_too_long" else output[rows])
            found[cause] = (int(rows.sum()), int(need.max()))
    if truncated.any():
        found["truncated"] = (int(truncated.sum()), int((prompt + wanted)[truncated].max()))
    return found


def rejection_warnings(config: RunConfig, tables: dict[str, Any],
                       num_requests: int) -> list[dict[str, Any]]:
    """One entry per cause seen: its allocators' counts, the longest request, the fix and
    the warning line (``tables`` maps each allocator to its request table)."""
    per: dict[str, dict[str, tuple[int, int]]] = {}
    for name, table in tables.items():
        for cause, found in _counts(table).items():
            per.setdefault(cause, {})[name] = found
    entries = []
    for cause, (verb, template) in CAUSES.items():
        if cause not in per:
            continue
        counts = {name: found[0] for name, found in per[cause].items()}
        needed = max(found[1] for found in per[cause].values())
        text = template.format(mml=config.scheduler.max_model_len,
                                    slots=config.cache.capacity_slots)
        fix = _fix(cause, config, needed)
        entries.append({"cause": cause, "allocators": counts, "num_requests": num_requests,
                        "longest_tokens": needed, "fix": fix,
                        "message": _message(verb, text, counts, len(tables), num_requests,
                                            needed, fix)})
    return entries


def _message(verb: str, text: str, counts: dict[str, int], num_allocators: int,
             num_requests: int, needed: int, fix: str) -> str:
    values = set(counts.values())
    if len(values) == 1:
        count = values.pop()
        who = "every allocator" if len(counts) == num_allocators else ", ".join(counts)
        share = f"{count} of {num_requests} requests ({100 * count / max(num_requests, 1):.1f} %)"
    else:
        who = "the allocators"
        share = ", ".join(f"{name} {count}" for name, count in counts.items()) + \
            f" of {num_requests} requests"
    would = "would keep their whole output" if verb == "truncated" else "would admit them"
    return f"{share} {verb} by {who}: {text} (the longest needs {needed} tokens); {fix} {would}"


def all_rejected(summaries: dict[str, dict[str, Any]]) -> bool:
    """Whether every allocator rejected every request (and there was at least one)."""
    return bool(summaries) and all(
        s["num_requests"] > 0 and s["num_rejected"] == s["num_requests"]
        for s in summaries.values())
