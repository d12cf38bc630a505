"""The fast prefix hash: chained, prefix-identifying, incremental, and hit-equivalent to sha256."""
from __future__ import annotations

import numpy as np
import pytest

from allocator.profiles import profile_for
from allocator.request import Request
from sim.workload.block_hash import FastBlockHasher, make_hasher
from tests.unit.simkit import make_trace, simulate
from traces import Trace, TraceRequest, add_system_prompt


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


# (lora_name, cache_salt) of requests over one shared 48-token prefix: unsalted and "" share,
# salts isolate, and under the plain (<= 0.30) format LoRA "x" and salt "x" give block 0 the
# same key (("x",)), which the tagged format (0.31+) tells apart.
_KEYED = [(None, None), (None, ""), (None, "s1"), (None, "s1"), (None, "s2"), ("x", None),
          (None, "x"), ("x", "s1"), ("x", None), ("y", None)]


def _common_blocks(a: list[bytes], b: list[bytes]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _hit_matrix(hashes: list[list[bytes]]) -> list[list[int]]:
    return [[_common_blocks(a, b) for b in hashes] for a in hashes]


@pytest.mark.parametrize("version", ["0.14", "0.33"])
def test_extra_keys_give_sha256_hit_lengths(version: str) -> None:
    """Salted, unsalted and "" salt requests, and LoRA adapters: for every pair the number of
    common leading blocks (the hit a request gets from another) is the same with the fast
    hash as with vLLM's sha256 in the profile's extra-key format."""
    profile = profile_for(version)
    fast = make_hasher(16, "fast", profile)
    exact = make_hasher(16, "sha256", profile)
    prefix = list(range(100, 148))
    results = {}
    for name, hasher in (("fast", fast), ("sha256", exact)):
        hashes = []
        for i, (lora, salt) in enumerate(_KEYED):
            tokens = prefix + [1000 + i] * 20
            request = Request(f"r{i}", tokens, 1, lora_name=lora, cache_salt=salt,
                              block_hasher=hasher)
            hashes.append(list(request.block_hashes))
        results[name] = _hit_matrix(hashes)
    assert results["fast"] == results["sha256"]
    matrix = results["fast"]
    assert matrix[0][1] == 3 and matrix[2][3] == 3 and matrix[0][2] == 0 and matrix[2][4] == 0
    assert matrix[5][8] == 3 and matrix[5][9] == 0 and matrix[7][2] == 0
    assert matrix[5][6] == (1 if profile.extra_keys != "tagged" else 0)


def test_fast_prefetched_and_incremental_hashes_agree_with_keys() -> None:
    """A keyed run hashed in one pass equals hash_tokens and the request hasher's pieces."""
    hasher = FastBlockHasher(16, "tagged")
    keys = hasher.key_lanes("x", "s1")
    tokens = np.arange(100, dtype=np.int32)
    whole = hasher.hash_tokens(tokens, keys=keys)
    runs, _ = hasher.hash_runs(np.concatenate([tokens, tokens]), np.array([0, 100, 200]),
                               [keys, None])
    assert runs[:6] == whole and runs[6:] == hasher.hash_tokens(tokens)
    request = Request("r", tokens[:40].tolist(), 100, lora_name="x", cache_salt="s1",
                      block_hasher=hasher)
    request.append_output_token_ids(tokens[40:].tolist())
    assert request.block_hashes == whole and whole != hasher.hash_tokens(tokens)


@pytest.mark.parametrize("version", ["0.14", "0.33"])
def test_salted_trace_fast_and_sha256_same_cached_tokens(version: str) -> None:
    """A trace with cache_salt and lora_name columns: every request's cached tokens are the
    same with the fast hash and with sha256, and the salts do isolate (fewer hits)."""
    rows = [TraceRequest(f"r{i}", 0.2 * i, 60, 4, line=i + 2, lora_name=lora,
                         cache_salt=salt or None) for i, (lora, salt) in enumerate(_KEYED)]
    plain = add_system_prompt(Trace.from_requests(
        [TraceRequest(r.request_id, r.arrival_s, 60, 4, line=r.line) for r in rows]), 48)
    keyed = add_system_prompt(Trace.from_requests(rows), 48)
    profile = profile_for(version)
    cached = {}
    for algo in ("fast", "sha256"):
        result = simulate(keyed, num_gpu_blocks=80, block_hash=algo, vllm_profile=profile)
        cached[algo] = list(result.log.request_columns()["cached_tokens"])
    assert cached["fast"] == cached["sha256"]
    unkeyed = simulate(plain, num_gpu_blocks=80, vllm_profile=profile)
    assert sum(cached["fast"]) < sum(unkeyed.log.request_columns()["cached_tokens"])


def test_lookahead_hash_covers_the_next_token() -> None:
    """With a lookahead of 1, block i's hash also depends on token (i+1)*bs and exists only
    once that token does; without one, it does not depend on it."""
    tokens = np.random.default_rng(4).integers(0, 32000, 200)
    changed = tokens.copy()
    changed[32] += 1
    ahead, plain = FastBlockHasher(16, lookahead=1), FastBlockHasher(16)
    base, other = ahead.hash_tokens(tokens), ahead.hash_tokens(changed)
    assert len(base) == 12 and len(ahead.hash_tokens(tokens[:192])) == 11
    assert base[0] == other[0] and base[1] != other[1]
    assert plain.hash_tokens(tokens)[1] == plain.hash_tokens(changed)[1]
    assert base != plain.hash_tokens(tokens)[:12]


def test_lookahead_runs_requests_and_pieces_agree() -> None:
    """Lookahead hashes of many runs in one pass equal hash_tokens per run and the hashes a
    request gathers as its tokens arrive (keys included), and stop one token short."""
    hasher = FastBlockHasher(16, "tagged", lookahead=1)
    keys = hasher.key_lanes("x", "s1")
    lengths = [0, 16, 17, 33, 200, 64, 65]
    tokens = np.random.default_rng(6).integers(0, 32000, sum(lengths)).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    hashes, block_offsets = hasher.hash_runs(tokens, offsets, [keys] * len(lengths))
    assert list(np.diff(block_offsets)) == [max(n - 1, 0) // 16 for n in lengths]
    for r, n in enumerate(lengths):
        run = tokens[offsets[r]:offsets[r + 1]]
        table = hashes[block_offsets[r]:block_offsets[r + 1]]
        assert table == hasher.hash_tokens(run, keys=keys)
        if n:
            request = Request("r", run[:1].tolist(), 300, lora_name="x", cache_salt="s1",
                              block_hasher=hasher)
            for token in run[1:].tolist():
                request.append_output_token_ids(token)
            assert request.block_hashes == table
