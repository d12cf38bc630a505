"""The fast prefix hash: chained, prefix-identifying, incremental, and hit-equivalent to sha256."""
from __future__ import annotations

import numpy as np

from sim.workload.block_hash import FastBlockHasher
from tests.unit.simkit import make_trace, simulate
from traces import add_system_prompt


def test_equal_prefixes_equal_hashes_and_a_change_breaks_the_chain() -> None:
    """Block i's hash depends on every token before its end, and only on those."""
    hasher = FastBlockHasher(16)
    tokens = np.random.default_rng(0).integers(0, 32000, 200)
    base = hasher.hash_tokens(tokens)
    changed = tokens.copy()
    changed[40] += 1
    other = hasher.hash_tokens(changed)
    assert len(base) == 12 and len(set(base)) == 12
    assert base[:2] == other[:2] and all(a != b for a, b in zip(base[2:], other[2:]))


def test_incremental_hashing_matches_whole_sequence() -> None:
    """Hashing in pieces (parent passed on) gives the same chain as hashing at once."""
    hasher = FastBlockHasher(16)
    tokens = np.arange(100) * 7
    parts = hasher.hash_tokens(tokens[:48])
    parts += hasher.hash_tokens(tokens[48:], parts[-1])
    assert parts == hasher.hash_tokens(tokens)


def test_fast_and_sha256_give_the_same_hits() -> None:
    """Same run with the fast hash and with vLLM's sha256: identical summaries."""
    trace = add_system_prompt(make_trace([(0.1 * i, 60 + i, 5) for i in range(12)]), 48,
                              num_prompts=2)
    results = []
    for algo in ("fast", "sha256"):
        r = simulate(trace, num_gpu_blocks=40, block_hash=algo)
        summary = dict(r.summary)
        summary.pop("wall_s")
        results.append(summary)
    assert results[0] == results[1] and results[0]["prefix_hit_rate"] > 0
    assert simulate(trace).summary["num_finished"] == 12


def test_hash_runs_equals_hash_tokens_per_run() -> None:
    """Hashing many runs in one pass gives each run its own chain, as hash_tokens does."""
    hasher = FastBlockHasher(16)
    rng = np.random.default_rng(3)
    lengths = [0, 15, 16, 17, 200, 3, 64, 1000, 31]
    tokens = rng.integers(0, 32000, sum(lengths)).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    hashes, block_offsets = hasher.hash_runs(tokens, offsets)
    assert list(np.diff(block_offsets)) == [n // 16 for n in lengths]
    for r in range(len(lengths)):
        run = tokens[offsets[r]:offsets[r + 1]]
        assert hashes[block_offsets[r]:block_offsets[r + 1]] == hasher.hash_tokens(run)
    empty, none = hasher.hash_runs(tokens[:10], np.array([0, 5, 10]))
    assert empty == [] and list(none) == [0, 0, 0]
