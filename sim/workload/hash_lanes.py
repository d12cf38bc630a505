"""The fast block hash's arithmetic: two 64-bit lanes of a chained polynomial over mixed
block content (``block_hash.py`` describes the hash and hands it out).

``Lanes`` holds the per-lane weights (extended over a lookahead's tokens) and the powers of
the chain's multiplier; ``ahead_tokens`` picks the tokens after each block, ``seed_lanes``
the chain's seed, ``as_hash_bytes`` turns lanes into the 16-byte hashes.
"""
from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

_U64 = np.uint64
_MASK = (1 << 64) - 1
_LANES = (
    # (multiplier R, content weight base, salt, seed H_{-1}) per lane; odd multipliers.
    (0x9E3779B97F4A7C15, 0xD6E8FEB86659FD93, 0x2545F4914F6CDD1D, 0x6A09E667F3BCC909),
    (0xC2B2AE3D27D4EB4F, 0xA0761D6478BD642F, 0x165667B19E3779F9, 0xBB67AE8584CAA73B),
)


_S30, _S27, _S31 = _U64(30), _U64(27), _U64(31)
_M1, _M2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)


def _mix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64 finaliser (uint64 arithmetic wraps by design)."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)  # type: ignore[no-any-return]


class Lanes:
    """Precomputed weights and powers for both 64-bit lanes (column k is lane k); the
    ``lookahead`` tokens after a block weigh on: W_j = base^(bs - 1 - j), negative powers
    being inverses mod 2**64 (the bases are odd)."""

    def __init__(self, block_size: int, seed: list[int] | None = None,
                 lookahead: int = 0) -> None:
        mults = [lane[0] for lane in _LANES]
        self.mults = mults
        self.invs = [pow(m, -1, 1 << 64) for m in mults]
        weights = np.array(
            [[pow(lane[1], block_size - 1 - j, 1 << 64) for lane in _LANES]
             for j in range(block_size + lookahead)], dtype=np.uint64)
        self.weights = weights[:block_size]
        self.ahead_weights = weights[block_size:]
        self.salt = np.array([lane[2] for lane in _LANES], dtype=np.uint64)
        self.seed = seed or [lane[3] for lane in _LANES]
        self.pow_r = np.ones((1, 2), dtype=np.uint64)
        self.pow_inv = np.ones((1, 2), dtype=np.uint64)

    def powers(self, count: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """R^k and R^-k for k = 1 .. count, shape [count, 2]."""
        if len(self.pow_r) <= count:
            size = max(count + 1, 2 * len(self.pow_r), 64)
            r = [[1, 1] for _ in range(size)]
            ri = [[1, 1] for _ in range(size)]
            for k in range(1, size):
                for lane in (0, 1):
                    r[k][lane] = r[k - 1][lane] * self.mults[lane] & _MASK
                    ri[k][lane] = ri[k - 1][lane] * self.invs[lane] & _MASK
            self.pow_r = np.array(r, dtype=np.uint64)
            self.pow_inv = np.array(ri, dtype=np.uint64)
        return self.pow_r[1:count + 1], self.pow_inv[1:count + 1]

    def content(self, blocks: npt.NDArray[np.uint64],
                keys: npt.NDArray[np.uint64] | None = None,
                ahead: npt.NDArray[np.uint64] | None = None) -> npt.NDArray[np.uint64]:
        """c_i per lane for each row of ``blocks`` ([num_blocks, block_size]), shape [n, 2];
        ``keys`` ([n, 2], optional) are the blocks' digested extra keys, ``ahead``
        ([n, lookahead], optional) the tokens after each block."""
        mixed = blocks @ self.weights + self.salt
        if ahead is not None:
            mixed += ahead @ self.ahead_weights
        if keys is not None:
            mixed ^= keys
        return _mix64(mixed)

    def chain(self, blocks: npt.NDArray[np.uint64], parent: list[int],
              keys: npt.NDArray[np.uint64] | None = None,
              ahead: npt.NDArray[np.uint64] | None = None) -> npt.NDArray[np.uint64]:
        """H_i per lane for each row of ``blocks`` ([num_blocks, block_size]) after ``parent``.

        H_i = R^(i+1) * (parent + sum_{m<=i} R^-(m+1) * c_m), all mod 2**64.
        """
        content = self.content(blocks, keys, ahead)
        pow_r, pow_inv = self.powers(len(content))
        acc = np.cumsum(content * pow_inv, axis=0, dtype=np.uint64)
        acc += np.array(parent, dtype=np.uint64)
        return acc * pow_r  # type: ignore[no-any-return]


def as_hash_bytes(lanes: npt.NDArray[np.uint64]) -> list[bytes]:
    """Block hashes as ``FastBlockHasher`` hands them out (16 bytes each) from their
    [num_blocks, 2] uint64 lanes."""
    hashes: list[bytes] = np.ascontiguousarray(lanes).view("V16").ravel().tolist()
    return hashes


_FIXED_SEED = hashlib.sha256(b"vllm-none-hash").digest()


def seed_lanes(none_hash_seed: str) -> list[int] | None:
    """The chain's seed H_-1: vLLM 0.29+'s fixed NONE_HASH seed gives lanes from its digest;
    under a "random" seed the default lanes stand in for it (a run's requests all share one
    seed, so it changes no hit, and runs must repeat)."""
    if none_hash_seed != "fixed":
        return None
    return [int.from_bytes(_FIXED_SEED[:8], "little"), int.from_bytes(_FIXED_SEED[8:16], "little")]


def ahead_tokens(tokens: npt.NDArray[np.integer], first: npt.NDArray[np.int64],
                 block_size: int, lookahead: int) -> npt.NDArray[np.uint64] | None:
    """The ``lookahead`` tokens after each block starting at ``first`` ([n, lookahead]), or
    None without a lookahead."""
    if not lookahead:
        return None
    return tokens[first[:, None] + (block_size + np.arange(lookahead))].astype(np.uint64)
