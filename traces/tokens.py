"""Token ids for traces that store sizes only, hash blocks, or explicit ids.

Prompts are never materialised for a whole trace. A request's prompt is a list of
segments (a shared system prompt, earlier conversation turns and their outputs) followed by
its own tokens, which come from explicit ids, from Mooncake hash ids expanded block by
block, or from `derive_token_ids` keyed by (seed, request id, position). Derivation is a
splitmix64 mix of a per-key 64-bit salt plus the position, so any token can be computed
without the ones before it, and equal keys always give equal runs.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
TokenArray = npt.NDArray[np.int32]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)

SEG_SYSTEM = 0
SEG_PROMPT = 1
SEG_OUTPUT = 2


def key_of(seed: int, label: str) -> np.uint64:
    """64-bit salt for a (seed, label) pair, stable across runs and platforms."""
    digest = hashlib.blake2b(f"{seed}\x1f{label}".encode(), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))


def mix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64 finaliser, vectorised; uint64 arithmetic wraps by design."""
    x = (x ^ (x >> np.uint64(30))) * _MUL1
    x = (x ^ (x >> np.uint64(27))) * _MUL2
    return x ^ (x >> np.uint64(31))


def derive_token_ids(
    seed: int, request_id: str, start: int, count: int, vocab_size: int = 32000
) -> TokenArray:
    """Deterministic pseudo-random token ids at positions [start, start + count).

    Args:
        seed: trace seed; different seeds give unrelated ids.
        request_id: the key (a request id, or any label such as a system prompt name).
        start: first position (0-based); outputs use start = prompt length.
        count: number of ids.
        vocab_size: ids fall in [0, vocab_size).

    Returns:
        int32 array of `count` ids.

    Raises:
        ValueError: negative start/count or vocab_size < 1.
    """
    if start < 0 or count < 0 or vocab_size < 1:
        raise ValueError(f"bad derive_token_ids args start={start} count={count} "
                         f"vocab_size={vocab_size}")
    pos = np.arange(start, start + count, dtype=np.uint64)
    x = mix64(pos * _GOLDEN + key_of(seed, request_id))
    return (x % np.uint64(vocab_size)).astype(np.int32)


def derive_token_runs(
    seed: int, keys: list[str], lengths: npt.ArrayLike, vocab_size: int = 32000
) -> tuple[TokenArray, IntArray]:
    """``derive_token_ids(seed, keys[r], 0, lengths[r])`` for every r, in one vectorised pass.

    Returns:
        (tokens, offsets): run r is ``tokens[offsets[r]:offsets[r + 1]]``.

    Raises:
        ValueError: a negative length, mismatched inputs or vocab_size < 1.
    """
    lens = np.asarray(lengths, dtype=np.int64)
    if lens.ndim != 1 or len(lens) != len(keys) or (lens < 0).any() or vocab_size < 1:
        raise ValueError(f"bad derive_token_runs args: {len(keys)} keys, lengths "
                         f"{lens.shape}, vocab_size={vocab_size}")
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    salts = np.array([key_of(seed, key) for key in keys], dtype=np.uint64)
    # Position of each token within its run: a global count minus its run's start offset.
    pos = np.arange(offsets[-1], dtype=np.uint64)
    pos -= np.repeat(offsets[:-1].astype(np.uint64), lens)
    pos *= _GOLDEN
    pos += np.repeat(salts, lens)
    x = mix64(pos)
    return (x % np.uint64(vocab_size)).astype(np.int32), offsets


def expand_hash_blocks(
    seed: int, hash_ids: npt.NDArray[np.int64], length: int, block_size: int,
    vocab_size: int = 32000,
) -> TokenArray:
    """Expand prefix-block hash ids into `length` tokens (last block may be partial).

    Each hash id maps to its own run of `block_size` tokens, so equal ids give identical
    runs and a shared id prefix is a shared token prefix at any allocator block size:

        hash ids   [ 7 ][ 9 ][ 4 ]          (block_size tokens each, last one partial)
        tokens     |t7..|t9..|t4.|          length = 2 * block_size + r
    """
    salt = key_of(seed, "hash-block")
    keys = mix64(hash_ids.astype(np.uint64) * _GOLDEN + salt)
    pos = np.arange(block_size, dtype=np.uint64) * _GOLDEN
    toks = mix64(keys[:, None] + pos[None, :]).reshape(-1)[:length]
    return (toks % np.uint64(vocab_size)).astype(np.int32)


@dataclass(frozen=True, slots=True, eq=False)
class TokenStore:
    """Per-source-row token content shared by every Trace derived from one load.

    kind "explicit": `values[offsets[k]:offsets[k+1]]` are row k's token ids.
    kind "hash": the same slice holds row k's hash ids of `block_size`-token blocks.
    """

    kind: str
    values: IntArray
    offsets: IntArray
    block_size: int = 512

    def __post_init__(self) -> None:
        if self.kind not in ("explicit", "hash"):
            raise ValueError(f"unknown token store kind {self.kind!r}")
        if self.offsets.ndim != 1 or len(self.offsets) < 1 or self.block_size < 1:
            raise ValueError("token store offsets must be a non-empty 1-D array")

    def row(self, k: int) -> IntArray:
        """Raw stored values of source row k (token ids or hash ids)."""
        return self.values[self.offsets[k]:self.offsets[k + 1]]

    def tokens(self, k: int, length: int, seed: int, vocab_size: int) -> TokenArray:
        """Up to `length` token ids of source row k (fewer if the row is shorter)."""
        raw = self.row(k)
        if self.kind == "explicit":
            return raw[:length].astype(np.int32)
        avail = min(length, len(raw) * self.block_size)
        return expand_hash_blocks(seed, raw, avail, self.block_size, vocab_size)


@dataclass(frozen=True, slots=True, eq=False)
class Segments:
    """Table of prompt-prefix segments, shared across traces and never mutated.

    Row j: kind (SEG_SYSTEM, SEG_PROMPT or SEG_OUTPUT), key (system prompt label or
    request id), src (token-store row or -1), start (first derived position: the earlier
    turn's prompt length for SEG_OUTPUT, else 0), length. A request lists its prefix as
    rows first .. first + count - 1; a later turn's rows repeat the earlier turn's rows and
    add that turn's own prompt and its output, so its prompt extends the earlier one.
    """

    kind: npt.NDArray[np.int8]
    key: npt.NDArray[np.str_]
    src: IntArray
    start: IntArray
    length: IntArray

    @staticmethod
    def empty() -> Segments:
        """A table with no rows."""
        z = np.zeros(0, dtype=np.int64)
        return Segments(np.zeros(0, dtype=np.int8), np.zeros(0, dtype="U1"), z, z, z)

    def __len__(self) -> int:
        return len(self.kind)


def own_tokens(
    store: TokenStore | None, src: int, key: str, start: int, count: int,
    seed: int, vocab_size: int,
) -> TokenArray:
    """A request's own prompt tokens: from the store, padded with derived ids."""
    got = np.zeros(0, dtype=np.int32)
    if store is not None and src >= 0 and count > 0:
        got = store.tokens(src, count, seed, vocab_size)
    if len(got) == count:
        return got
    pad = derive_token_ids(seed, key, start + len(got), count - len(got), vocab_size)
    return np.concatenate([got, pad])


def segment_tokens(
    seg: Segments, j: int, store: TokenStore | None, seed: int, vocab_size: int
) -> TokenArray:
    """Token ids of segment row j."""
    kind, key = int(seg.kind[j]), str(seg.key[j])
    start, length = int(seg.start[j]), int(seg.length[j])
    if kind == SEG_SYSTEM:
        return derive_token_ids(seed, "system-prompt:" + key, 0, length, vocab_size)
    if kind == SEG_OUTPUT:
        return derive_token_ids(seed, key, start, length, vocab_size)
    return own_tokens(store, int(seg.src[j]), key, start, length, seed, vocab_size)
