"""Unit tests for traces.summary: counts, rates, percentiles and ideal prefix reuse."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from traces import (
    Trace,
    add_system_prompt,
    default_workload,
    ideal_prefix_reuse,
    limit,
    load_trace,
    multi_turn,
    summarize,
)


def test_summary_counts_and_percentiles() -> None:
    """Counts, rate and length percentiles match values computed by hand."""
    t = Trace(np.arange(101) * 0.5, np.arange(1, 102), np.full(101, 7))
    s = summarize(t)
    assert s["num_requests"] == 101 and s["span_s"] == 50.0
    assert s["rate_per_s"] == pytest.approx(2.0)
    assert s["prompt_len"]["p50"] == 51 and s["prompt_len"]["max"] == 101
    assert s["output_len"]["mean"] == 7 and s["interarrival_cv"] == pytest.approx(0.0)
    assert s["prefix_reuse"]["reused_tokens"] == 0


def test_system_prompt_reuse_is_exact() -> None:
    """With one shared 64-token prompt, every user after the first reuses 64 tokens."""
    base = Trace(np.arange(50.0), np.full(50, 10), np.full(50, 3))
    t = add_system_prompt(base, 64, fraction=1.0, num_prompts=1)
    reuse = ideal_prefix_reuse(t, block_size=16)
    assert reuse is not None and reuse["reused_tokens"] == 49 * 64
    reuse5 = ideal_prefix_reuse(t, block_size=5)
    assert reuse5 is not None and reuse5["reused_tokens"] == 49 * 60


def test_multi_turn_reuse_counts_history() -> None:
    """A second turn reuses the full blocks of the first turn's prompt and output."""
    base = Trace([0.0, 1.0], [32, 16], [32, 4])
    t = multi_turn(base, turns=2, think_time_s=0.0)
    reuse = ideal_prefix_reuse(t, block_size=16)
    assert t.prompt_lens[1] == 80
    assert reuse is not None and reuse["reused_tokens"] == 64


def test_default_workload_reuse_matches_its_construction() -> None:
    """The default workload's reuse equals the repeated system prompt blocks."""
    t = default_workload()
    users = int(np.count_nonzero(t.prefix_lens > 0))
    reuse = ideal_prefix_reuse(t, block_size=16)
    assert reuse is not None and reuse["reused_tokens"] == (users - 4) * 128


def test_mooncake_reuse_by_hash_ids_and_by_tokens_agree(shared_traces: Path) -> None:
    """On the real trace, hash-id accounting agrees with token fingerprints, and the whole
    trace shows the documented ~37% reusable prefix."""
    t = load_trace(shared_traces / "mooncake_conversation_trace.jsonl")
    head = limit(t, 150)
    by_hash = ideal_prefix_reuse(head, block_size=16)
    by_tokens = ideal_prefix_reuse(head, block_size=16, method="token ids")
    assert by_hash is not None and by_hash["method"] == "hash ids"
    assert by_tokens is not None and by_tokens["method"] == "token ids"
    assert by_hash["reused_tokens"] > 0
    assert by_tokens["reused_tokens"] == pytest.approx(by_hash["reused_tokens"], rel=0.02)
    whole = summarize(t)["prefix_reuse"]
    assert whole["fraction"] == pytest.approx(0.37, abs=0.01)


def test_summary_reports_metadata(shared_traces: Path) -> None:
    """The summary carries source, format, checksum and real-trace statistics."""
    s = summarize(load_trace(shared_traces / "AzureLLMInferenceTrace_conv.csv"))
    assert s["format"] == "azure-2023" and len(s["sha256"]) == 64
    assert s["num_requests"] == 19366
    assert s["rate_per_s"] == pytest.approx(19365 / s["span_s"])
    assert s["prompt_len"]["max"] == 14050


def _reuse_model(t: Trace, block_size: int) -> int:
    """Block-by-block reference: a dict from prefix chain to most tokens cached."""
    assert t.store is not None and t.token_src is not None
    hb, nodes, cached, total = t.store.block_size, {}, {}, 0
    for i in range(len(t)):
        parent, hit, open_run = -1, 0, True
        for k, h in enumerate(t.store.row(int(t.token_src[i])).tolist()):
            node = nodes.setdefault((parent, h), len(nodes))
            blk = max(0, min(hb, int(t.prompt_lens[i]) - k * hb))
            if open_run:
                hit += min(cached.get(node, 0), blk)
                open_run = cached.get(node, 0) >= blk
            cached[node] = max(cached.get(node, 0), blk)
            parent = node
        total += hit - hit % block_size
    return total


def test_hash_reuse_matches_block_by_block_model(tmp_path: Path) -> None:
    """The vectorised hash-id replay equals a simple per-block model, partial blocks too."""
    rows = [(1100, [0, 1, 2]), (1300, [0, 1, 2]), (700, [0, 1]), (1024, [0, 1]),
            (520, [0, 1]), (512, [5]), (300, [5]), (900, [5, 1])]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(
        f'{{"timestamp": {k}, "input_length": {n}, "output_length": 1, "hash_ids": {ids}}}\n'
        for k, (n, ids) in enumerate(rows)))
    t = load_trace(path)
    for bs in (1, 16, 512):
        got = ideal_prefix_reuse(t, block_size=bs)
        assert got is not None and got["reused_tokens"] == _reuse_model(t, bs)
    assert _reuse_model(t, 1) > 0


def test_hash_reuse_matches_model_on_real_trace(shared_traces: Path) -> None:
    """On the first 2,000 real Mooncake requests the two accountings agree exactly."""
    t = limit(load_trace(shared_traces / "mooncake_conversation_trace.jsonl"), 2000)
    got = ideal_prefix_reuse(t, block_size=16)
    assert got is not None and got["reused_tokens"] == _reuse_model(t, 16)


def test_serving_field_counts_and_cache_isolation(tmp_path: Path) -> None:
    """The summary counts salted, LoRA and prioritised requests; identical prompts under
    different salts or adapters reuse nothing, under the same one they reuse everything."""
    ids = list(range(64))
    rows = [{"input_toks": 64, "output_toks": 1, "arrival_time_ns": k, "input_tok_ids": ids,
             **extra} for k, extra in enumerate([
                 {"cache_salt": "a"}, {"cache_salt": "b"}, {"cache_salt": "a"},
                 {"lora_name": "x", "priority": 2}, {"lora_name": "x", "priority": -1}])]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summarize(load_trace(path))
    assert (s["num_with_cache_salt"], s["num_distinct_cache_salts"]) == (3, 2)
    assert (s["num_with_lora_name"], s["num_distinct_lora_names"]) == (2, 1)
    assert (s["num_with_priority"], s["num_distinct_priorities"]) == (2, 3)
    # salt a reuses request 0 (64 tokens), lora x reuses request 3; b and the first x do not
    assert s["prefix_reuse"]["reused_tokens"] == 2 * 64
