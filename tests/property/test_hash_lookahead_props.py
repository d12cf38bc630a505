"""Property tests for lookahead block hashes (vLLM 0.33, EAGLE): the simulator's fast hasher
(precomputed tables, per-request calls, one pass over many runs) and the reference sha256
hasher agree on when each block's hash appears and on which blocks two sequences share."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.request import Request
from sim.workload.block_hash import FastBlockHasher
from sim.workload.sim_request import SimRequest

SETTINGS = settings(max_examples=40, deadline=None)


def _sequences(data: st.DataObject, bs: int) -> tuple[np.ndarray, np.ndarray]:
    """Two token arrays sharing a random prefix (then differing at once, or ending)."""
    shared = data.draw(st.lists(st.integers(0, 9), max_size=6 * bs))
    tails = [data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=4 * bs))
             for _ in range(2)]
    if tails[0][0] == tails[1][0]:
        tails[1][0] = tails[0][0] + 1
    return tuple(np.array(shared + tail, dtype=np.int32) for tail in tails)  # type: ignore[return-value]


@SETTINGS
@given(data=st.data(), bs=st.sampled_from([1, 2, 4, 16]), lookahead=st.integers(0, 2))
def test_tables_calls_and_reference_grow_alike(data: st.DataObject, bs: int,
                                               lookahead: int) -> None:
    """After every append: the table-fed SimRequest, the one calling the fast hasher and a
    Request hold the same fast hashes, as many as the sha256 request, which is
    ``(num_tokens - lookahead) // bs``; runs hashed in one pass are those tables."""
    init_none_hash(sha256)
    fast = FastBlockHasher(bs, lookahead=lookahead)
    ref_hasher = get_request_block_hasher(bs, sha256, "tagged", lookahead)
    tokens = _sequences(data, bs)[0]
    prompt = data.draw(st.integers(1, len(tokens)))
    table = fast.hash_tokens(tokens)
    runs, offsets = fast.hash_runs(tokens, np.array([0, len(tokens)]))
    assert runs == table and list(offsets) == [0, len(table)]
    with_table = SimRequest("a", tokens, prompt, 64, block_hasher=fast, block_hashes=table)
    calling = SimRequest("a", tokens, prompt, 64, block_hasher=fast)
    plain = Request("a", tokens[:prompt].tolist(), 64, block_hasher=fast)
    ref = Request("a", tokens[:prompt].tolist(), 64, block_hasher=ref_hasher)
    count = prompt
    while True:
        assert with_table.block_hashes == calling.block_hashes == plain.block_hashes
        assert len(ref.block_hashes) == len(plain.block_hashes)
        assert len(ref.block_hashes) == max(count - lookahead, 0) // bs
        if count == len(tokens):
            break
        step = data.draw(st.integers(1, len(tokens) - count))
        ids = tokens[count:count + step].tolist()
        for request in (with_table, calling, plain, ref):
            request.append_output_token_ids(ids)
        count += step


@SETTINGS
@given(data=st.data(), bs=st.sampled_from([1, 2, 4, 16]), lookahead=st.integers(0, 2))
def test_fast_and_sha256_share_the_same_blocks(data: st.DataObject, bs: int,
                                               lookahead: int) -> None:
    """Two sequences with a common prefix: block i's hashes are equal under the fast hash
    exactly when they are under sha256 (the block and its lookahead tokens are common)."""
    init_none_hash(sha256)
    fast = FastBlockHasher(bs, lookahead=lookahead)
    ref_hasher = get_request_block_hasher(bs, sha256, "tagged", lookahead)
    a, b = _sequences(data, bs)
    common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    fa, fb = fast.hash_tokens(a), fast.hash_tokens(b)
    ra = Request("a", a.tolist(), 1, block_hasher=ref_hasher).block_hashes
    rb = Request("b", b.tolist(), 1, block_hasher=ref_hasher).block_hashes
    for i in range(min(len(fa), len(fb))):
        shared = (i + 1) * bs + lookahead <= common
        assert (fa[i] == fb[i]) == (ra[i] == rb[i]) == shared
