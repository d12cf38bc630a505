"""Trace summary: counts, rates, length percentiles and the ideal prefix reuse.

Ideal prefix reuse is the share of prompt tokens an infinite prefix cache could serve:
requests are replayed in arrival order, and each request's leading full blocks that an
earlier request already produced (its prompt or its output) count as reused. Traces
with Mooncake hash ids are measured on the hash ids directly (cheap at 145M tokens);
others on their token ids, block fingerprints chained so a block matches only under an
identical prefix.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from traces.model import Trace
from traces.tokens import _GOLDEN, key_of, mix64

PERCENTILES = (50, 90, 99)


def _stats(values: npt.NDArray[np.int64]) -> dict[str, float]:
    if not len(values):
        return {"mean": 0.0, "min": 0.0, "max": 0.0, "total": 0.0}
    out = {"mean": float(values.mean()), "min": float(values.min()),
           "max": float(values.max()), "total": float(values.sum())}
    for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        out[f"p{p}"] = float(v)
    return out


def _fingerprints(tokens: npt.NDArray[np.int32], block_size: int, salt: np.uint64) -> list[int]:
    """Chained fingerprints of the full blocks of `tokens` (prefix-sensitive)."""
    nb = len(tokens) // block_size
    blocks = tokens[: nb * block_size].astype(np.uint64).reshape(nb, block_size)
    pos = np.arange(block_size, dtype=np.uint64) * _GOLDEN
    per_block = mix64(mix64(blocks + pos + salt).sum(axis=1, dtype=np.uint64))
    chained = np.cumsum(mix64(per_block + np.arange(nb, dtype=np.uint64) * _GOLDEN),
                        dtype=np.uint64)
    return [int(x) for x in mix64(chained)]


def isolation_keys(trace: Trace) -> list[str]:
    """Per request, the cache namespace: requests share cached blocks only within one
    (lora_name, cache_salt) pair, as vLLM mixes both into the block hashes."""
    empty = np.full(len(trace), "", dtype=np.str_)
    loras = trace.lora_names if trace.lora_names is not None else empty
    salts = trace.cache_salts if trace.cache_salts is not None else empty
    return [f"{lora}\x1f{salt}" for lora, salt in zip(loras.tolist(), salts.tolist(),
                                                       strict=True)]


def _reuse_by_tokens(trace: Trace, block_size: int) -> int:
    seen: set[int] = set()
    spaces = isolation_keys(trace)
    salts = {key: key_of(0, "fingerprint" + key) for key in set(spaces)}
    reused = 0
    for i in range(len(trace)):
        prompt = trace.prompt_token_ids(i)
        fps = _fingerprints(np.concatenate([prompt, trace.output_token_ids(i)]), block_size,
                            salts[spaces[i]])
        hits = 0
        for fp in fps[: len(prompt) // block_size]:
            if fp not in seen:
                break
            hits += 1
        reused += hits * block_size
        seen.update(fps)
    return reused


def _segment_starts(counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """For a flat array of per-request runs of `counts`, each element's run start."""
    return np.repeat(np.cumsum(counts) - counts, counts)


def _reuse_by_hash_ids(trace: Trace, block_size: int) -> int:
    """Vectorised replay over hash blocks (no Python loop per block):

        key(block k of a request) = hash of its ids 0..k   (prefix chain)
        cached(block) = most tokens any earlier request held under that key
        reuse(request) = leading blocks fully cached, plus the first partial hit
    """
    assert trace.store is not None and trace.token_src is not None
    store, hblock = trace.store, trace.store.block_size
    src = trace.token_src
    counts = store.offsets[src + 1] - store.offsets[src]
    req = np.repeat(np.arange(len(trace)), counts)
    pos = np.arange(int(counts.sum())) - _segment_starts(counts)
    ids = store.values[store.offsets[src][req] + pos].astype(np.uint64)
    steps = np.cumsum(mix64(ids * _GOLDEN + pos.astype(np.uint64)), dtype=np.uint64)
    base = np.concatenate([[np.uint64(0)], steps])[_segment_starts(counts)]
    keys = mix64(steps - base)
    blk = np.clip(trace.prompt_lens[req] - pos * hblock, 0, hblock)
    order = np.argsort(keys, kind="stable")  # blocks are already in request order
    group = np.concatenate([[0], np.cumsum(keys[order][1:] != keys[order][:-1])])
    big = hblock + 1
    run_max = np.maximum.accumulate(group * big + blk[order]) - group * big
    prev = np.concatenate([[0], run_max[:-1]])
    prev[np.concatenate([[True], group[1:] != group[:-1]])] = 0
    cached = np.empty_like(prev)
    cached[order] = prev
    fails = (cached < blk).astype(np.int64)
    csum = np.cumsum(fails)
    fails_before = csum - fails - (np.concatenate([[0], csum])[_segment_starts(counts)])
    hit = np.where(fails_before == 0, np.minimum(cached, blk), 0)
    per_req = np.bincount(req, weights=hit, minlength=len(trace)).astype(np.int64)
    return int((per_req - per_req % block_size).sum())


def ideal_prefix_reuse(
    trace: Trace, block_size: int = 16, max_tokens: int = 50_000_000, method: str = "auto"
) -> dict[str, Any] | None:
    """Reusable prompt tokens under an infinite cache, or None when too large to measure.

    Traces without prefix structure reuse nothing (their derived ids are unique per
    request). Hash-id traces are measured per hash block, counting whole `block_size`
    blocks; others expand token ids when the trace has at most `max_tokens` of them.
    `method` ("auto", "hash ids" or "token ids") forces one accounting.
    """
    total = int(trace.prompt_lens.sum())
    hashable = (trace.store is not None and trace.store.kind == "hash"
                and not len(trace.segments) and trace.store.block_size % block_size == 0
                and trace.cache_salts is None and trace.lora_names is None)
    if method == "auto":
        method = "hash ids" if hashable else "token ids"
        if not trace.has_prefix_structure or total == 0:
            method = "none (no shared content)"
    if method == "hash ids" and hashable:
        reused = _reuse_by_hash_ids(trace, block_size)
    elif method == "token ids" and total + int(trace.output_lens.sum()) <= max_tokens:
        reused = _reuse_by_tokens(trace, block_size)
    elif method.startswith("none"):
        reused = 0
    else:
        return None
    return {"block_size": block_size, "prompt_tokens": total, "method": method,
            "reused_tokens": reused, "fraction": reused / total if total else 0.0}


def summarize(trace: Trace, block_size: int = 16) -> dict[str, Any]:
    """Counts, rates, length percentiles and ideal prefix reuse of a trace, as plain data."""
    m = trace.metadata
    gaps = np.diff(trace.arrival_s)
    rate = (len(trace) - 1) / m.span_s if m.span_s > 0 else None
    cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else None
    return {
        "source": m.source, "format": m.format, "sha256": m.sha256,
        "num_requests": len(trace), "num_rows": m.num_rows, "num_skipped": m.num_skipped,
        "num_truncated": m.num_truncated, "span_s": m.span_s, "rate_per_s": rate,
        "interarrival_cv": cv, "prompt_len": _stats(trace.prompt_lens),
        "output_len": _stats(trace.output_lens),
        "num_sessions": 0 if trace.session_ids is None else len(np.unique(trace.session_ids)),
        "num_n_gt_1": int(np.count_nonzero(trace.n > 1)),
        "num_beam_search": int(np.count_nonzero(trace.beam_width > 1)),
        "has_token_ids": trace.has_token_ids, "tokenizer": m.tokenizer,
        "tokens_estimated": m.tokens_estimated, **serving_counts(trace),
        "prefix_reuse": ideal_prefix_reuse(trace, block_size), "notes": list(m.notes),
    }


def serving_counts(trace: Trace) -> dict[str, int]:
    """Requests carrying each optional serving field, and how many distinct values."""
    out: dict[str, int] = {}
    for key, col in (("cache_salt", trace.cache_salts), ("lora_name", trace.lora_names)):
        given = col[col != ""] if col is not None else np.zeros(0, dtype=np.str_)
        out[f"num_with_{key}"] = len(given)
        out[f"num_distinct_{key}s"] = len(np.unique(given))
    prio = trace.priorities if trace.priorities is not None else np.zeros(0, dtype=np.int64)
    out["num_with_priority"] = int(np.count_nonzero(prio))
    out["num_distinct_priorities"] = len(np.unique(prio)) if len(prio) else 1
    rates = trace.acceptance_rates
    given = 0 if rates is None else int(np.count_nonzero(~np.isnan(rates)))
    out["num_with_acceptance_rate"] = given
    return out
