"""A fast, vectorised block hasher for simulation runs (``--hash fast``, the default).

vLLM chains each full block's hash over (parent hash, block tokens). Hashing every block with
sha256 over pickle costs microseconds per block, which dominates a 20k-request replay. Here a
block's hash is two 64-bit lanes of a chained polynomial over per-block mixed content:

    c_i = mix64(sum_j tok[i*bs + j] * W_j + salt)       content of block i (non-linear)
    H_i = H_{i-1} * R + c_i   (mod 2**64)               chained like vLLM's parent hash

so H_i identifies tokens 0 .. (i+1)*bs - 1, equal prefixes give equal hashes and unequal ones
collide with probability about 2**-128: prefix-cache hits are the same as with sha256. With a
lookahead L (vLLM 0.33's EAGLE hashes) c_i also weighs the L tokens after block i (weights
W_bs .. W_bs+L-1, the same power series), and block i has a hash once they exist. A
request's extra keys (LoRA name, cache salt; ``allocator.hashing`` builds them in the
profile's format) are digested once and xor-ed into the mixed content of every block they
belong to, so requests share blocks exactly when vLLM's keys are equal. All
full blocks of a token array are hashed in a few numpy calls, and ``hash_runs`` hashes many
sequences' token arrays in one pass (the simulator hashes each sequence's whole future token
list in advance and hands the hashes to its ``SimRequest``).
"""
from __future__ import annotations

import hashlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import numpy.typing as npt

from allocator import hashing
from allocator.hashing import (
    generate_block_hash_extra_keys,
    get_hash_fn_by_name,
    get_request_block_hasher,
    init_none_hash,
    num_hashable_blocks,
)
from allocator.profiles import DEFAULT_PROFILE, VllmProfile
from allocator.request import Request
from sim.workload.hash_lanes import Lanes, ahead_tokens, as_hash_bytes, seed_lanes

__all__ = ["FastBlockHasher", "KeyLanes", "as_hash_bytes", "extra_key_lanes", "make_hasher",
           "request_key_lanes"]

KeyLanes = tuple[tuple[int, int], tuple[int, int]] | None
"""A request's digested extra keys: (block 0's lanes, every later block's lanes); None: none."""

def _digest(extra: tuple[Any, ...] | None) -> tuple[int, int]:
    """Two 64-bit lanes standing for one block's extra keys ((0, 0) for none)."""
    if extra is None:
        return 0, 0
    raw = hashlib.sha256(repr(extra).encode()).digest()
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:16], "little")


def extra_key_lanes(lora_name: str | None, cache_salt: str | None, block_size: int,
                    extra_keys: str = "plain") -> KeyLanes:
    """A request's extra keys in the ``extra_keys`` format, digested for the fast hash.

    vLLM gives block 0 the LoRA key and the salt (a non-empty one) and every later block the
    LoRA key only; ``allocator.hashing.generate_block_hash_extra_keys`` builds both here.
    """
    if lora_name is None and not cache_salt:
        return None
    request = SimpleNamespace(lora_name=lora_name, lora_path=None, cache_salt=cache_salt)
    first = generate_block_hash_extra_keys(request, 0, block_size, 0, extra_keys)[0]
    rest = generate_block_hash_extra_keys(request, block_size, 2 * block_size, 0,
                                          extra_keys)[0]
    return _digest(first), _digest(rest)


def request_key_lanes(request: Any, block_size: int, extra_keys: str) -> KeyLanes:
    """:func:`extra_key_lanes` of a request's ``lora_name`` and ``cache_salt``."""
    return extra_key_lanes(request.lora_name, request.cache_salt, block_size, extra_keys)


def _block_keys(keys: KeyLanes, first: bool, count: int) -> npt.NDArray[np.uint64] | None:
    """The [count, 2] extra-key lanes of ``count`` consecutive blocks (``first``: the first of
    them is block 0), or None without keys."""
    if keys is None or count == 0:
        return None
    out = np.empty((count, 2), dtype=np.uint64)
    out[:] = np.array(keys[1], dtype=np.uint64)
    if first:
        out[0] = np.array(keys[0], dtype=np.uint64)
    return out


class FastBlockHasher:
    """``hasher(request) -> list[bytes]``: the request's new full-block hashes (16 bytes each).

    Drop-in for ``allocator.hashing.RequestBlockHasher``: it publishes ``block_size`` and
    ``lookahead`` so that ``Request`` calls it only when a block fills up (and its lookahead
    tokens exist: ``allocator.hashing.num_hashable_blocks``). ``extra_keys`` is the profile's
    extra-key format (``VllmProfile.extra_keys``), ``none_hash_seed`` its NONE_HASH seed
    switch, ``lookahead`` the tokens after each block its hash covers.
    """

    __slots__ = ("_lanes", "block_size", "extra_keys", "lookahead")

    def __init__(self, block_size: int, extra_keys: str = "plain",
                 none_hash_seed: str = "random", lookahead: int = 0) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if lookahead < 0:
            raise ValueError(f"lookahead must be >= 0, got {lookahead}")
        self.block_size = block_size
        self.extra_keys = extra_keys
        self.lookahead = lookahead
        self._lanes = Lanes(block_size, seed_lanes(none_hash_seed), lookahead)

    def key_lanes(self, lora_name: str | None, cache_salt: str | None) -> KeyLanes:
        """:func:`extra_key_lanes` in this hasher's format."""
        return extra_key_lanes(lora_name, cache_salt, self.block_size, self.extra_keys)

    def hash_tokens(self, token_ids: npt.ArrayLike, parent: bytes | None = None,
                    keys: KeyLanes = None) -> list[bytes]:
        """Hashes of the full blocks of ``token_ids`` (those followed by their lookahead
        tokens) following the block hashed ``parent`` (None: these start at block 0), with the
        request's extra ``keys``."""
        tokens = np.asarray(token_ids, dtype=np.int64)
        bs = self.block_size
        num_blocks = num_hashable_blocks(len(tokens), bs, self.lookahead)
        if num_blocks == 0:
            return []
        blocks = tokens[: num_blocks * bs].astype(np.uint64).reshape(num_blocks, bs)
        ahead = (ahead_tokens(tokens, np.arange(num_blocks) * bs, bs, self.lookahead)
                 if self.lookahead else None)
        if parent is None:
            seed = self._lanes.seed
        else:
            seed = [int.from_bytes(parent[:8], "little"), int.from_bytes(parent[8:16], "little")]
        block_keys = _block_keys(keys, parent is None, num_blocks)
        return as_hash_bytes(self._lanes.chain(blocks, seed, block_keys, ahead))

    def hash_runs(self, tokens: npt.NDArray[np.integer], offsets: npt.NDArray[np.int64],
                  keys: list[KeyLanes] | None = None
                  ) -> tuple[list[bytes], npt.NDArray[np.int64]]:
        """``hash_tokens`` of every run ``tokens[offsets[r]:offsets[r + 1]]`` in one pass
        (run r with extra keys ``keys[r]``).

        Returns:
            (hashes, block_offsets): run r's block hashes are
            ``hashes[block_offsets[r]:block_offsets[r + 1]]``.
        """
        lanes, block_offsets = self.hash_runs_array(tokens, offsets, keys)
        return as_hash_bytes(lanes), block_offsets

    def hash_runs_array(self, tokens: npt.NDArray[np.integer], offsets: npt.NDArray[np.int64],
                        keys: list[KeyLanes] | None = None
                        ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """:meth:`hash_runs` with the hashes as a [num_blocks, 2] uint64 array (both lanes;
        :func:`as_hash_bytes` turns it into the hash list)."""
        bs = self.block_size
        starts = offsets[:-1]
        counts = np.fromiter((num_hashable_blocks(n, bs, self.lookahead)
                              for n in (offsets[1:] - starts).tolist()),
                             dtype=np.int64, count=len(starts))
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
        content = lanes.content(blocks, _run_keys(keys, counts, local),
                                ahead_tokens(tokens, first, bs, self.lookahead))
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
        bs = self.block_size
        end = num_hashable_blocks(request.num_tokens, bs, self.lookahead)
        if end <= start:
            return []
        array = getattr(request, "token_array", None)  # a SimRequest: no list to build
        tokens = (array if array is not None
                  else request.all_token_ids)[start * bs: end * bs + self.lookahead]
        keys = request_key_lanes(request, bs, self.extra_keys)
        return self.hash_tokens(tokens, done[-1] if done else None, keys)


def _run_keys(keys: list[KeyLanes] | None, counts: npt.NDArray[np.int64],
              local: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64] | None:
    """Every block's extra-key lanes ([num_blocks, 2]) for runs of ``counts`` blocks."""
    if keys is None or all(k is None for k in keys):
        return None
    first = np.array([k[0] if k else (0, 0) for k in keys], dtype=np.uint64).reshape(-1, 2)
    rest = np.array([k[1] if k else (0, 0) for k in keys], dtype=np.uint64).reshape(-1, 2)
    return np.where((local == 0)[:, None], np.repeat(first, counts, axis=0),
                    np.repeat(rest, counts, axis=0))


def make_hasher(block_size: int, algo: str, profile: VllmProfile = DEFAULT_PROFILE,
                lookahead: int = 0) -> Any:
    """``fast`` (this module's ``FastBlockHasher``, the default) or a vLLM hash by name
    (sha256, sha256_cbor, xxhash, blake2b), in ``profile``'s extra-key format and seed, each
    block's hash covering the ``lookahead`` tokens after it."""
    if algo == "fast":
        return FastBlockHasher(block_size, profile.extra_keys, profile.none_hash_seed, lookahead)
    hash_fn = get_hash_fn_by_name(algo)
    if hashing.NONE_HASH is None:
        init_none_hash(hash_fn, profile.none_hash_seed)
    return get_request_block_hasher(block_size, hash_fn, profile.extra_keys, lookahead)
