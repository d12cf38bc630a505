"""A fast, vectorised block hasher for simulation runs (``--hash fast``, the default).

vLLM chains each full block's hash over (parent hash, block tokens). Hashing every block with
sha256 over pickle costs microseconds per block, which dominates a 20k-request replay. Here a
block's hash is two 64-bit lanes of a chained polynomial over per-block mixed content:

    c_i = mix64(sum_j tok[i*bs + j] * W_j + salt)       content of block i (non-linear)
    H_i = H_{i-1} * R + c_i   (mod 2**64)               chained like vLLM's parent hash

so H_i identifies tokens 0 .. (i+1)*bs - 1, equal prefixes give equal hashes and unequal ones
collide with probability about 2**-128: prefix-cache hits are the same as with sha256. All
full blocks of a token array are hashed in a few numpy calls, and ``hash_runs`` hashes many
sequences' token arrays in one pass (the simulator hashes each sequence's whole future token
list in advance and hands the hashes to its ``SimRequest``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from allocator.hashing import get_hash_fn_by_name, get_request_block_hasher
from allocator.request import Request

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


class _Lanes:
    """Precomputed weights and powers for both 64-bit lanes (column k is lane k)."""

    def __init__(self, block_size: int) -> None:
        mults = [lane[0] for lane in _LANES]
        self.mults = mults
        self.invs = [pow(m, -1, 1 << 64) for m in mults]
        self.weights = np.array(
            [[pow(lane[1], block_size - 1 - j, 1 << 64) for lane in _LANES]
             for j in range(block_size)], dtype=np.uint64)
        self.salt = np.array([lane[2] for lane in _LANES], dtype=np.uint64)
        self.seed = [lane[3] for lane in _LANES]
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

    def content(self, blocks: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """c_i per lane for each row of ``blocks`` ([num_blocks, block_size]), shape [n, 2]."""
        return _mix64(blocks @ self.weights + self.salt)

    def chain(self, blocks: npt.NDArray[np.uint64], parent: list[int]) -> npt.NDArray[np.uint64]:
        """H_i per lane for each row of ``blocks`` ([num_blocks, block_size]) after ``parent``.

        H_i = R^(i+1) * (parent + sum_{m<=i} R^-(m+1) * c_m), all mod 2**64.
        """
        content = self.content(blocks)
        pow_r, pow_inv = self.powers(len(content))
        acc = np.cumsum(content * pow_inv, axis=0, dtype=np.uint64)
        acc += np.array(parent, dtype=np.uint64)
        return acc * pow_r  # type: ignore[no-any-return]


def as_hash_bytes(lanes: npt.NDArray[np.uint64]) -> list[bytes]:
    """Block hashes as ``FastBlockHasher`` hands them out (16 bytes each) from their
    [num_blocks, 2] uint64 lanes."""
    hashes: list[bytes] = np.ascontiguousarray(lanes).view("V16").ravel().tolist()
    return hashes


class FastBlockHasher:
    """``hasher(request) -> list[bytes]``: the request's new full-block hashes (16 bytes each).

    Drop-in for ``allocator.hashing.RequestBlockHasher``: it publishes ``block_size`` so that
    ``Request`` calls it only when a block fills up.
    """

    __slots__ = ("_lanes", "block_size")

    def __init__(self, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self._lanes = _Lanes(block_size)

    def hash_tokens(self, token_ids: npt.ArrayLike, parent: bytes | None = None) -> list[bytes]:
        """Hashes of the full blocks of ``token_ids`` following the block hashed ``parent``."""
        tokens = np.asarray(token_ids, dtype=np.int64)
        num_blocks = len(tokens) // self.block_size
        if num_blocks == 0:
            return []
        blocks = tokens[: num_blocks * self.block_size].astype(np.uint64)
        blocks = blocks.reshape(num_blocks, self.block_size)
        if parent is None:
            seed = self._lanes.seed
        else:
            seed = [int.from_bytes(parent[:8], "little"), int.from_bytes(parent[8:16], "little")]
        return as_hash_bytes(self._lanes.chain(blocks, seed))

    def hash_runs(self, tokens: npt.NDArray[np.integer], offsets: npt.NDArray[np.int64]
                  ) -> tuple[list[bytes], npt.NDArray[np.int64]]:
        """``hash_tokens`` of every run ``tokens[offsets[r]:offsets[r + 1]]`` in one pass.

        Returns:
            (hashes, block_offsets): run r's block hashes are
            ``hashes[block_offsets[r]:block_offsets[r + 1]]``.
        """
        lanes, block_offsets = self.hash_runs_array(tokens, offsets)
        return as_hash_bytes(lanes), block_offsets

    def hash_runs_array(self, tokens: npt.NDArray[np.integer], offsets: npt.NDArray[np.int64]
                        ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """:meth:`hash_runs` with the hashes as a [num_blocks, 2] uint64 array (both lanes;
        :func:`as_hash_bytes` turns it into the hash list)."""
        bs = self.block_size
        starts = offsets[:-1]
        counts = (offsets[1:] - starts) // bs
        block_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=block_offsets[1:])
        total = int(block_offsets[-1])
        if total == 0:
            return np.zeros((0, 2), dtype=np.uint64), block_offsets
        # Block b of run r starts at starts[r] + local(b) * bs; local(b) = b - block_offsets[r].
        local = np.arange(total, dtype=np.int64) - np.repeat(block_offsets[:-1], counts)
        first = np.repeat(starts, counts) + local * bs
        blocks = tokens[first[:, None] + np.arange(bs)].astype(np.uint64)
        lanes = self._lanes
        content = lanes.content(blocks)
        pow_r, pow_inv = lanes.powers(int(counts.max()))
        # The chain of each run, as in _Lanes.chain, with a cumulative sum restarted per run.
        acc = np.cumsum(content * pow_inv[local], axis=0, dtype=np.uint64)
        before = np.zeros((len(counts), 2), dtype=np.uint64)
        nonempty = counts > 0
        head = block_offsets[:-1][nonempty]
        before[nonempty] = np.where((head > 0)[:, None], acc[np.maximum(head - 1, 0)], 0)
        acc -= np.repeat(before, counts, axis=0)
        acc += np.array(lanes.seed, dtype=np.uint64)
        acc *= pow_r[local]
        return acc, block_offsets

    def __call__(self, request: Request) -> list[bytes]:
        done = request.block_hashes
        start = len(done)
        end = request.num_tokens // self.block_size
        if end <= start:
            return []
        bs = self.block_size
        array = getattr(request, "token_array", None)  # a SimRequest: no list to build
        tokens = (array if array is not None else request.all_token_ids)[start * bs: end * bs]
        return self.hash_tokens(tokens, done[-1] if done else None)


def make_hasher(block_size: int, algo: str) -> Any:
    """``fast`` (this module's ``FastBlockHasher``, the default) or a vLLM hash by name
    (sha256, sha256_cbor, xxhash, blake2b)."""
    if algo == "fast":
        return FastBlockHasher(block_size)
    return get_request_block_hasher(block_size, get_hash_fn_by_name(algo))
