"""SimRequest: the allocator sees it exactly as a Request over the same tokens."""
from __future__ import annotations

import numpy as np
import pytest

from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.request import Request
from sim.workload.block_hash import FastBlockHasher
from sim.workload.sim_request import SimRequest


@pytest.mark.parametrize("kind", ["fast", "sha256", "none"])
def test_sim_request_matches_request(kind: str) -> None:
    """Same token counts, lists and block hashes after every append, for every hasher."""
    init_none_hash(sha256)
    hasher = {"fast": FastBlockHasher(16), "sha256": get_request_block_hasher(16, sha256),
              "none": None}[kind]
    tokens = np.random.default_rng(5).integers(0, 32000, 120).astype(np.int32)
    prompt = 37
    ref = Request("r", tokens[:prompt].tolist(), 83, block_hasher=hasher)
    sim = SimRequest("r", tokens, prompt, 83, block_hasher=hasher)
    appended = prompt
    for step in [1, 4, 1, 16, 9, 1, 30, 5]:
        ids = tokens[appended:appended + step].tolist()
        ref.append_output_token_ids(ids[0] if step == 1 else ids)
        sim.append_output_token_ids(ids[0] if step == 1 else ids)
        appended += step
        assert sim.num_tokens == ref.num_tokens == appended
        assert sim.num_output_tokens == ref.num_output_tokens
        assert sim.block_hashes == ref.block_hashes
        assert sim.all_token_ids == ref.all_token_ids
        assert sim.output_token_ids == ref.output_token_ids
    assert sim.prompt_token_ids == ref.prompt_token_ids
    assert sim.num_prompt_tokens == ref.num_prompt_tokens == prompt


def test_sim_request_rejects_bad_input() -> None:
    tokens = np.arange(10, dtype=np.int32)
    with pytest.raises(ValueError, match="prompt length 0"):
        SimRequest("a", tokens, 0, 4)
    with pytest.raises(ValueError, match="max_tokens"):
        SimRequest("a", tokens, 5, 0)
    req = SimRequest("a", tokens, 8, 4)
    with pytest.raises(ValueError, match="passes the 10 known tokens"):
        req.append_output_token_ids([1, 2, 3])


def test_precomputed_hashes_match_the_hasher() -> None:
    """Given every block's hash in advance, a SimRequest's block_hashes grow exactly as the
    hasher would grow them; a table of the wrong length is refused."""
    hasher = FastBlockHasher(16)
    tokens = np.random.default_rng(9).integers(0, 32000, 150).astype(np.int32)
    table = hasher.hash_tokens(tokens)
    with_table = SimRequest("t", tokens, 20, 130, block_hasher=hasher, block_hashes=table)
    plain = SimRequest("t", tokens, 20, 130, block_hasher=hasher)
    for step in [1, 11, 1, 16, 40, 3, 58]:
        with_table.append_output_token_ids([0] * step)
        plain.append_output_token_ids([0] * step)
        assert with_table.block_hashes == plain.block_hashes
    assert with_table.block_hashes == table
    with pytest.raises(ValueError, match="block hashes for"):
        SimRequest("t", tokens, 20, 130, block_hasher=hasher, block_hashes=table[:-1])


def test_advance_to_equals_appending_the_known_outputs() -> None:
    """advance_to(n) leaves the request as appending its next outputs would; never back,
    never past the array."""
    hasher = FastBlockHasher(16)
    tokens = np.random.default_rng(2).integers(0, 32000, 90).astype(np.int32)
    moved = SimRequest("m", tokens, 20, 70, block_hasher=hasher)
    appended = SimRequest("m", tokens, 20, 70, block_hasher=hasher)
    for target in [21, 32, 33, 64, 50, 90]:
        moved.advance_to(target)
        if target > appended.num_tokens:
            appended.append_output_token_ids(tokens[appended.num_tokens:target].tolist())
        assert moved.num_tokens == appended.num_tokens
        assert moved.block_hashes == appended.block_hashes
    with pytest.raises(ValueError, match="passes the 90 known tokens"):
        moved.advance_to(91)


@pytest.mark.parametrize("kind", ["fast", "sha256"])
def test_lookahead_tables_and_hasher_grow_alike(kind: str) -> None:
    """With lookahead hashes a SimRequest with the precomputed table, one without and a
    Request hold the same hashes after every append (a block's hash once its next token is
    there); the table is one block shorter than the full blocks when the tokens end on one."""
    init_none_hash(sha256)
    hasher = (FastBlockHasher(16, lookahead=1) if kind == "fast"
              else get_request_block_hasher(16, sha256, "tagged", 1))
    tokens = np.random.default_rng(2).integers(0, 32000, 128).astype(np.int32)
    table = hasher.hash_tokens(tokens) if kind == "fast" else None
    ref = Request("t", tokens[:32].tolist(), 96, block_hasher=hasher)
    plain = SimRequest("t", tokens, 32, 96, block_hasher=hasher)
    sims = [plain] if table is None else [plain, SimRequest("t", tokens, 32, 96,
                                                            block_hasher=hasher,
                                                            block_hashes=table)]
    assert len(ref.block_hashes) == 1
    appended = 32
    for step in [1, 15, 1, 16, 30, 1, 32]:
        ids = tokens[appended:appended + step].tolist()
        ref.append_output_token_ids(ids)
        for sim in sims:
            sim.append_output_token_ids(ids)
            assert sim.block_hashes == ref.block_hashes
        appended += step
        assert len(ref.block_hashes) == (appended - 1) // 16
    if table is not None:
        assert len(table) == 7
        with pytest.raises(ValueError, match="lookahead 1"):
            SimRequest("t", tokens, 32, 96, block_hasher=hasher, block_hashes=table + table[:1])
