"""Unit tests for Mooncake hash-id expansion: equal hash ids give equal token runs, so
the prefix structure survives at allocator block sizes 16 and 512."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from traces import Trace, load_trace


def _blocks(tokens: np.ndarray, block_size: int) -> list[bytes]:
    full = len(tokens) // block_size
    return [tokens[k * block_size:(k + 1) * block_size].tobytes() for k in range(full)]


def _shared_blocks(a: np.ndarray, b: np.ndarray, block_size: int) -> int:
    count = 0
    for x, y in zip(_blocks(a, block_size), _blocks(b, block_size), strict=False):
        if x != y:
            break
        count += 1
    return count


def _shared_ids(a: np.ndarray, b: np.ndarray) -> int:
    count = 0
    for x, y in zip(a.tolist(), b.tolist(), strict=False):
        if x != y:
            break
        count += 1
    return count


def _fixture(tmp_path: Path) -> Trace:
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
            {"timestamp": 10, "input_length": 1300, "output_length": 5, "hash_ids": [0, 1, 3]},
            {"timestamp": 20, "input_length": 700, "output_length": 5, "hash_ids": [0, 4]},
            {"timestamp": 30, "input_length": 600, "output_length": 5, "hash_ids": [9, 1]}]
    path = tmp_path / "mc.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_trace(path)


@pytest.mark.parametrize("block_size", [16, 512])
def test_fixture_prefix_equality(tmp_path: Path, block_size: int) -> None:
    """Shared leading hash ids become exactly the shared leading full blocks."""
    t = _fixture(tmp_path)
    toks = [t.prompt_token_ids(i) for i in range(len(t))]
    assert [len(x) for x in toks] == [1100, 1300, 700, 600]
    per_id = 512 // block_size
    assert _shared_blocks(toks[0], toks[1], block_size) == 2 * per_id
    assert _shared_blocks(toks[0], toks[2], block_size) == 1 * per_id
    assert _shared_blocks(toks[0], toks[3], block_size) == 0
    assert np.array_equal(toks[0][512:600], toks[3][512:600])


def test_partial_last_block_is_a_prefix_of_the_full_block(tmp_path: Path) -> None:
    """The last hash id may cover a partial block: its tokens start the full run."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, '
                    '"hash_ids": [7, 8]}\n{"timestamp": 1, "input_length": 1024, '
                    '"output_length": 1, "hash_ids": [7, 8]}\n')
    t = load_trace(path)
    a, b = t.prompt_token_ids(0), t.prompt_token_ids(1)
    assert np.array_equal(a, b[:600])


@pytest.mark.parametrize("block_size", [16, 512])
def test_real_trace_prefix_equality(shared_traces: Path, block_size: int) -> None:
    """On the real trace, requests sharing k leading hash ids share k * 512 tokens."""
    t = load_trace(shared_traces / "mooncake_conversation_trace.jsonl")
    checked = 0
    for i in range(1, 60):
        a_ids, b_ids = t.prefix_block_ids(0), t.prefix_block_ids(i)
        assert a_ids is not None and b_ids is not None
        k = _shared_ids(a_ids, b_ids)
        a, b = t.prompt_token_ids(0), t.prompt_token_ids(i)
        full_a, full_b = int(t.prompt_lens[0]) // 512, int(t.prompt_lens[i]) // 512
        if k > min(full_a, full_b):
            continue
        assert _shared_blocks(a, b, block_size) == k * (512 // block_size)
        checked += k > 0
    assert checked > 10


def test_expansion_is_lazy(shared_traces: Path) -> None:
    """Loading keeps one int per hash block, far fewer than the prompt tokens."""
    t = load_trace(shared_traces / "mooncake_conversation_trace.jsonl")
    assert t.store is not None
    assert t.store.values.nbytes < 4_000_000
    assert int(t.prompt_lens.sum()) > 140_000_000
