"""kernels.validate.kv_content: prefix hashes and the K/V/Q rows drawn from them."""
from __future__ import annotations

import numpy as np
import torch

from kernels.validate.kv_content import (
    BASE,
    GOLDEN,
    MASK64,
    MIX1,
    MIX2,
    KVContent,
    extend_hashes,
    initial_hash,
)

CPU = torch.device("cpu")


def _loop_hashes(prev: int, tokens: list[int]) -> list[int]:
    out = []
    for t in tokens:
        prev = (prev * BASE + t + 1) & MASK64
        out.append(prev)
    return out


def _mix_py(x: int) -> int:
    x = ((x ^ (x >> 30)) * MIX1) & MASK64
    x = ((x ^ (x >> 27)) * MIX2) & MASK64
    return x ^ (x >> 31)


def test_vectorised_hashes_match_the_recurrence() -> None:
    """extend_hashes equals H_t = H_{t-1} * B + token + 1 (mod 2^64), also when resumed."""
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 128_000, 300).tolist()
    prev = initial_hash(5)
    full = extend_hashes(prev, tokens)
    assert full.tolist() == _loop_hashes(prev, tokens)
    resumed = extend_hashes(int(full[99]), tokens[100:])
    assert resumed.tolist() == full[100:].tolist()


def test_hash_depends_on_the_whole_prefix() -> None:
    """Changing the first token changes every later hash; equal prefixes give equal hashes."""
    a = extend_hashes(initial_hash(0), [1, 2, 3, 4])
    b = extend_hashes(initial_hash(0), [9, 2, 3, 4])
    c = extend_hashes(initial_hash(0), [1, 2, 3, 7])
    assert (a != b).all()
    assert a[:3].tolist() == c[:3].tolist() and a[3] != c[3]


def test_rows_match_a_python_splitmix_draw() -> None:
    """Element e of a row is splitmix64(H + (e + 1) * golden) mapped to [-sqrt3, sqrt3)."""
    h = extend_hashes(initial_hash(2), [17, 4, 99])
    content = KVContent(4, 2, 16, torch.float32, CPU)
    k, v = content.kv_rows(h)
    for row, hv in enumerate(h.tolist()):
        for e in (0, 5, 31, 63):
            bits = _mix_py((hv + (e + 1) * GOLDEN) & MASK64)
            want = ((bits >> 40) / 2**24 * 2 - 1) * 3**0.5
            got = (k if e < 32 else v)[row].flatten()[e % 32].item()
            assert abs(got - want) < 1e-6


def test_rows_are_deterministic_and_distinct_in_every_dtype() -> None:
    """Same hashes give identical rows; different prefixes give different K, V and Q."""
    h = extend_hashes(initial_hash(0), list(range(64)))
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        content = KVContent(8, 2, 32, dtype, CPU)
        k1, v1 = content.kv_rows(h)
        k2, v2 = content.kv_rows(h.copy())
        assert torch.equal(k1, k2) and torch.equal(v1, v2) and k1.dtype == dtype
        assert content.q_rows(h).shape == (64, 8, 32)
        assert not torch.equal(k1[0], k1[1]) and not torch.equal(k1, v1)
        assert not torch.equal(content.q_rows(h)[:, :2], k1)
    vals = KVContent(1, 1, 64, torch.float32, CPU).kv_rows(h)[0]
    assert abs(vals.mean().item()) < 0.1 and 0.85 < vals.var().item() < 1.15
