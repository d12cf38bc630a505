"""Block hashing for prefix caching, as in vLLM v0.14 (spec section 3) and its later profiles.

A block's hash is chained: it covers the parent block's hash, the block's own token ids and the
block's extra keys (LoRA, cache salt), so block i's hash identifies tokens 0..(i+1)*bs-1.
Only full blocks are hashed; with a lookahead L (vLLM 0.33, EAGLE) also the L tokens after the
block, as extra keys ``(keys, *next_tokens)``, so the hash exists once they do. The hash
function is injectable (``hash_fn(obj) -> bytes``, ``allocator/hash_fns.py``); the default is
sha256 over pickle protocol 5, byte-for-byte the same as vLLM's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from allocator.hash_fns import (
    HashFn,
    blake2b,
    get_hash_fn_by_name,
    sha256,
    sha256_cbor,
    xxhash,
    xxhash_cbor,
)

__all__ = [  # the hash functions are re-exported: callers name them as this module's
    "DEFAULT_NONE_HASH_SEED", "EXTRA_KEY_FORMATS", "GROUP_ID_SUFFIXES", "NONE_HASH",
    "BlockHash", "BlockHashListWithBlockSize", "BlockHashWithGroupId", "HashFn", "Request",
    "RequestBlockHasher", "blake2b", "generate_block_hash_extra_keys", "get_block_hash",
    "get_group_id", "get_hash_fn_by_name", "get_request_block_hasher", "group_id_suffix",
    "hash_block_tokens", "init_none_hash", "lookahead_extra_keys", "make_block_hash_with_group_id",
    "num_hashable_blocks", "sha256", "sha256_cbor", "xxhash", "xxhash_cbor",
]

BlockHash = bytes
"""A block hash: the raw digest returned by the hash function."""

BlockHashWithGroupId = bytes
"""A block hash followed by the 4-byte big-endian KV-cache group id: the prefix-cache key."""


NONE_HASH: BlockHash | None = None
"""Seed used as the parent of the first block; set by :func:`init_none_hash` (process-wide)."""


DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
"""The seed vLLM 0.29+ uses for the sha256 family when PYTHONHASHSEED is unset."""


def init_none_hash(hash_fn: HashFn, none_hash_seed: str = "random") -> BlockHash:
    """Set and return the first-block seed ``NONE_HASH`` following vLLM's rule.

    With ``PYTHONHASHSEED`` set, the seed is ``hash_fn(os.environ["PYTHONHASHSEED"])`` (the
    string), so it is reproducible across processes. Otherwise, with ``none_hash_seed``
    "random" (vLLM <= 0.28) it is ``os.urandom(32)``; with "fixed" (0.29+) it is
    ``hash_fn("vllm-none-hash")``, except for the non-cryptographic ``xxhash``, which gets
    ``hash_fn`` of a random hex string (the profile switch ``none_hash_seed``).

    Raises:
        ValueError: for an unknown ``none_hash_seed``.
    """
    global NONE_HASH
    if none_hash_seed not in ("random", "fixed"):
        raise ValueError(f"none_hash_seed must be 'random' or 'fixed', got {none_hash_seed!r}")
    seed = os.environ.get("PYTHONHASHSEED")
    if seed is not None:
        NONE_HASH = hash_fn(seed)
    elif none_hash_seed == "random":
        NONE_HASH = os.urandom(32)
    elif hash_fn is xxhash:
        NONE_HASH = hash_fn(os.urandom(32).hex())
    else:
        NONE_HASH = hash_fn(DEFAULT_NONE_HASH_SEED)
    return NONE_HASH


def hash_block_tokens(
    hash_fn: HashFn,
    parent_block_hash: BlockHash | None,
    curr_block_token_ids: Sequence[int],
    extra_keys: tuple[Any, ...] | None = None,
) -> BlockHash:
    """Hash one block: ``hash_fn((parent or NONE_HASH, tuple(token_ids), extra_keys))``.

    Raises:
        RuntimeError: if the parent is falsy and :func:`init_none_hash` was never called.
    """
    if not parent_block_hash:
        if NONE_HASH is None:
            raise RuntimeError("NONE_HASH is unset: call init_none_hash(hash_fn) first")
        parent_block_hash = NONE_HASH
    return hash_fn((parent_block_hash, tuple(curr_block_token_ids), extra_keys))


GROUP_ID_SUFFIXES = tuple(group_id.to_bytes(4, "big", signed=False) for group_id in range(16))
"""``group_id_suffix(g)`` for the first 16 group ids (hot paths index it directly)."""


def group_id_suffix(group_id: int) -> bytes:
    """The group id as 4 big-endian unsigned bytes, the tail of a prefix-cache key
    (precomputed for small ids: keys are built once per cached block and per lookup)."""
    if 0 <= group_id < len(GROUP_ID_SUFFIXES):
        return GROUP_ID_SUFFIXES[group_id]
    return group_id.to_bytes(4, "big", signed=False)


def make_block_hash_with_group_id(block_hash: BlockHash, group_id: int) -> BlockHashWithGroupId:
    """Append the group id as 4 big-endian unsigned bytes to form the prefix-cache key."""
    return block_hash + group_id_suffix(group_id)


def get_block_hash(key: BlockHashWithGroupId) -> BlockHash:
    """Strip the 4-byte group id from a prefix-cache key."""
    return key[:-4]


def get_group_id(key: BlockHashWithGroupId) -> int:
    """Read the group id from the last 4 bytes of a prefix-cache key."""
    return int.from_bytes(key[-4:], "big", signed=False)


def num_hashable_blocks(num_tokens: int, block_size: int, lookahead: int = 0) -> int:
    """How many leading blocks of ``num_tokens`` tokens have a hash: the full blocks followed
    by their ``lookahead`` tokens (vLLM 0.33's lookahead hashes; 0: every full block)."""
    return max(num_tokens - lookahead, 0) // block_size


def lookahead_extra_keys(
    extra_keys: tuple[Any, ...] | None, token_ids: Sequence[int], end: int, lookahead: int
) -> tuple[Any, ...]:
    """A lookahead hash's extra keys, as vLLM 0.33 builds them for the block ending at ``end``:
    ``(keys, next_token)`` for one token, ``(keys, *next_tokens)`` for more."""
    if lookahead == 1:
        return (extra_keys, token_ids[end])
    return (extra_keys, *token_ids[end : end + lookahead])


class Request(Protocol):
    """What hashing reads of a request (``allocator.request.Request`` has it all); a protocol,
    so that this module and the request module do not import each other."""

    @property
    def lora_name(self) -> str | None: ...
    @property
    def lora_path(self) -> str | None: ...
    @property
    def cache_salt(self) -> str | None: ...
    @property
    def block_hashes(self) -> list[BlockHash]: ...
    @property
    def all_token_ids(self) -> Sequence[int]: ...


EXTRA_KEY_FORMATS = ("plain", "mm_offset", "tagged")
"""Extra-key formats (profile switch ``extra_keys``); "mm_offset" differs from "plain" only in
multimodal keys, which pagedsim does not model."""


def generate_block_hash_extra_keys(
    request: Request,
    start_token_idx: int,
    end_token_idx: int,
    start_mm_idx: int = 0,
    extra_keys: str = "plain",
) -> tuple[tuple[Any, ...] | None, int]:
    """Extra keys of the block covering tokens [start, end): (keys or None, next mm index).

    Order as in vLLM: LoRA, then the cache salt (first block only, and only when non-empty:
    ``""`` shares the cache with unsalted requests). "plain" keys are the LoRA name and the
    salt; "tagged" (vLLM 0.31+) are ``("lora", name, path)`` and ``("cache_salt", salt)``.
    Multimodal and prompt-embeds keys are out of scope, so the mm index is returned unchanged.
    """
    keys: list[Any] = []
    tagged = extra_keys == "tagged"
    if request.lora_name is not None:
        keys.append(("lora", request.lora_name, request.lora_path) if tagged else request.lora_name)
    if request.cache_salt and start_token_idx == 0:
        keys.append(("cache_salt", request.cache_salt) if tagged else request.cache_salt)
    return (tuple(keys) if keys else None), start_mm_idx


class RequestBlockHasher:
    """Callable ``hasher(request) -> list[BlockHash]`` returning the request's new full-block hashes.

    It continues from ``len(request.block_hashes) * block_size`` and returns ``[]`` while the next
    block is incomplete (with ``lookahead`` L, until its L next tokens exist too).
    ``block_size`` and ``lookahead`` are public so :class:`Request` can skip the call cheaply.
    The seed is captured at construction (``NONE_HASH``, initialised with ``hash_fn`` if unset).
    """

    __slots__ = ("block_size", "extra_keys", "hash_fn", "lookahead", "none_hash")

    def __init__(
        self,
        block_size: int,
        hash_fn: HashFn,
        none_hash: BlockHash | None = None,
        extra_keys: str = "plain",
        lookahead: int = 0,
    ):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if extra_keys not in EXTRA_KEY_FORMATS:
            raise ValueError(f"extra_keys must be one of {EXTRA_KEY_FORMATS}, got {extra_keys!r}")
        if lookahead < 0:
            raise ValueError(f"lookahead must be >= 0, got {lookahead}")
        self.block_size = block_size
        self.lookahead = lookahead
        self.extra_keys = extra_keys
        self.hash_fn = hash_fn
        if none_hash is None:
            none_hash = NONE_HASH if NONE_HASH is not None else init_none_hash(hash_fn)
        self.none_hash: BlockHash = none_hash

    def __call__(self, request: Request) -> list[BlockHash]:
        block_size = self.block_size
        block_hashes = request.block_hashes
        done = len(block_hashes)
        token_ids = request.all_token_ids
        lookahead = self.lookahead
        num_blocks = num_hashable_blocks(len(token_ids), block_size, lookahead)
        if done >= num_blocks:
            return []
        hash_fn = self.hash_fn
        parent = block_hashes[-1] if block_hashes else self.none_hash
        plain = request.lora_name is None and not request.cache_salt
        extra_keys = self.extra_keys
        new_hashes: list[BlockHash] = []
        for start in range(done * block_size, num_blocks * block_size, block_size):
            end = start + block_size
            extra = (
                None
                if plain
                else generate_block_hash_extra_keys(request, start, end, 0, extra_keys)[0]
            )
            if lookahead:
                extra = lookahead_extra_keys(extra, token_ids, end, lookahead)
            parent = hash_fn((parent, tuple(token_ids[start:end]), extra))
            new_hashes.append(parent)
        return new_hashes


def get_request_block_hasher(
    block_size: int, caching_hash_fn: HashFn, extra_keys: str = "plain", lookahead: int = 0
) -> RequestBlockHasher:
    """Return the block hasher that :class:`Request` calls on creation and on every append.

    ``extra_keys`` is the profile's extra-key format (``VllmProfile.extra_keys``), ``lookahead``
    the tokens after each block its hash covers (``profiles.num_hash_lookahead_tokens``).
    """
    return RequestBlockHasher(block_size, caching_hash_fn, extra_keys=extra_keys,
                              lookahead=lookahead)


class BlockHashListWithBlockSize:
    """Read-only view of small-block hashes as hashes of ``scale``-times larger blocks (0.14).

    The hash of large block j is the byte concatenation of small hashes j*scale..(j+1)*scale-1.
    vLLM uses it when the scheduler block size is a multiple of the hash block size.
    """

    __slots__ = ("block_hashes", "scale")

    def __init__(self, block_hashes: list[BlockHash], hash_block_size: int, target_block_size: int):
        if hash_block_size < 1 or target_block_size % hash_block_size != 0:
            raise ValueError(
                f"block size {target_block_size} is not a multiple of hash block size "
                f"{hash_block_size}"
            )
        self.block_hashes = block_hashes
        self.scale = target_block_size // hash_block_size

    def __len__(self) -> int:
        return len(self.block_hashes) // self.scale

    def __getitem__(self, idx: int) -> BlockHash:
        if not 0 <= idx < len(self):
            raise IndexError(f"block index {idx} out of range for {len(self)} blocks")
        start = idx * self.scale
        return b"".join(self.block_hashes[start : start + self.scale])
