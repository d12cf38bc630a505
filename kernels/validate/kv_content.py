"""Deterministic K, V and Q rows for the allocation-log validator, as functions of token prefixes.

Token t of a sequence gets a 64-bit rolling hash of the token ids at positions 0..t,
`H_t = H_{t-1} * B + (token_t + 1) (mod 2^64)`, so equal prefixes give equal hashes and any
difference anywhere before t changes them. Its K, V and Q rows are a counter-based draw seeded
by `H_t`: element e of the row is a splitmix64-style mix of `H_t + (e + 1) * golden`, mapped to
a uniform value of unit variance and rounded to the cache dtype. So a wrong prefix hit, a
missing copy-on-write copy, a block reused while still live or an off-by-one slot puts rows of
some *other* prefix where the reference expects this one.

One attention layer with the model's real head layout and dtype is enough: every layer of a
real model reads the same block table and slot mapping, so a layer's output depends on the
allocator only through which rows it gathers; more layers would repeat the same check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

MASK64 = (1 << 64) - 1
BASE = 0x9E3779B97F4A7C15 | 1  # odd, so invertible modulo 2^64
BASE_INV = pow(BASE, -1, 1 << 64)
GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
Q_SALT = 0xD1B54A32D192ED03


def _signed(x: int) -> int:
    """The int64 with the same 64 bits as unsigned `x` (torch has no uint64 arithmetic)."""
    x &= MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


def initial_hash(seed: int) -> int:
    """The hash state before position 0 (an empty prefix), per validation seed."""
    return (seed * GOLDEN + 0x2545F4914F6CDD1D) & MASK64


def extend_hashes(prev: int, token_ids: np.ndarray | list[int]) -> np.ndarray:
    """Rolling hashes of the positions after a prefix whose last hash is `prev`.

    Vectorised form of the recurrence: `H_i = B^(i+1) * prev + B^i * sum_{j<=i} T_j * B^-j`
    with `T_j = token_j + 1`, all modulo 2^64 (numpy uint64 arithmetic wraps).

    Returns:
        uint64 array, one hash per token.
    """
    toks = np.asarray(token_ids, dtype=np.int64).astype(np.uint64) + np.uint64(1)
    n = toks.size
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        pow_b = np.cumprod(np.full(n, BASE, dtype=np.uint64))  # B^1 .. B^n
        inv = np.empty(n, dtype=np.uint64)
        inv[0] = 1
        if n > 1:
            inv[1:] = np.cumprod(np.full(n - 1, BASE_INV, dtype=np.uint64))  # B^0 .. B^-(n-1)
        sums = np.cumsum(toks * inv, dtype=np.uint64)
        pow_b0 = np.concatenate([np.ones(1, dtype=np.uint64), pow_b[:-1]])  # B^0 .. B^(n-1)
        return pow_b * np.uint64(prev) + pow_b0 * sums


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 bit patterns (products wrap modulo 2^64)."""
    x = (x ^ _shr(x, 30)) * _signed(MIX1)
    x = (x ^ _shr(x, 27)) * _signed(MIX2)
    return x ^ _shr(x, 31)


def _uniform_rows(hashes: np.ndarray, salt: int, numel: int, device: torch.device) -> torch.Tensor:
    """`[n, numel]` float32 values, uniform with mean 0 and variance 1, seeded per row."""
    seeds = torch.from_numpy((hashes ^ np.uint64(salt)).view(np.int64)).to(device)
    counters = torch.arange(1, numel + 1, dtype=torch.int64, device=device) * _signed(GOLDEN)
    bits = _mix(seeds[:, None] + counters[None, :])
    u = _shr(bits, 40).to(torch.float32) * (1.0 / (1 << 24))  # 24 bits: exact in fp32
    return (u * 2.0 - 1.0) * 3.0**0.5


@dataclass(frozen=True, slots=True)
class KVContent:
    """Rows for one attention layer: `num_kv_heads` K/V heads, `num_heads` query heads."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device
    q_gain: float = 1.0

    def kv_rows(self, hashes: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V rows `[n, num_kv_heads, head_dim]` in the cache dtype for these hashes."""
        row = self.num_kv_heads * self.head_dim
        vals = _uniform_rows(hashes, 0, 2 * row, self.device).to(self.dtype)
        shape = (len(hashes), self.num_kv_heads, self.head_dim)
        return vals[:, :row].reshape(shape), vals[:, row:].reshape(shape)

    def q_rows(self, hashes: np.ndarray) -> torch.Tensor:
        """Query rows `[n, num_heads, head_dim]` for the tokens with these hashes."""
        vals = _uniform_rows(hashes, Q_SALT, self.num_heads * self.head_dim, self.device)
        vals = vals * self.q_gain
        return vals.to(self.dtype).reshape(len(hashes), self.num_heads, self.head_dim)
