"""The hash functions of prefix caching, by the names vLLM's ``--prefix-caching-hash-algo`` uses.

Each maps a Python object (a block's parent hash, token ids and extra keys) to a digest:
vLLM's ``sha256`` (pickle protocol 5), ``sha256_cbor``, ``xxhash`` and ``xxhash_cbor``, plus
pagedsim's ``blake2b`` and ``fast``. ``allocator/hashing.py`` chains them into block hashes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import pickle
from collections.abc import Callable
from typing import Any

HashFn = Callable[[Any], bytes]


# Bound once: the hash functions run once per full block, and the module attribute lookups
# were a measurable part of hashing a 16-token block (~3 us in all).
_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
_dumps = pickle.dumps
_sha256_new = hashlib.sha256


def sha256(obj: Any) -> bytes:
    """sha256 over ``pickle.dumps(obj, protocol=5)``: vLLM's default prefix-caching hash."""
    return _sha256_new(_dumps(obj, _PICKLE_PROTOCOL)).digest()


def sha256_cbor(obj: Any) -> bytes:
    """sha256 over canonical CBOR: language independent; needs the optional ``cbor2`` package."""
    try:
        import cbor2
    except ImportError as exc:
        raise ImportError(
            "hash function 'sha256_cbor' needs the optional package cbor2 "
            "(pip install cbor2, or pagedsim[cbor])"
        ) from exc
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def xxhash(obj: Any) -> bytes:
    """xxh3_128 over pickle, as vLLM's ``xxhash`` option; needs the optional ``xxhash`` package."""
    try:
        import xxhash as xxhash_module
    except ImportError as exc:
        raise ImportError(
            "hash function 'xxhash' needs the optional package xxhash (pip install xxhash); "
            "'blake2b' is a stdlib alternative"
        ) from exc
    digest: bytes = xxhash_module.xxh3_128_digest(
        pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    )
    return digest


def xxhash_cbor(obj: Any) -> bytes:
    """xxh3_128 over canonical CBOR, as vLLM's ``xxhash_cbor`` option; needs the optional
    ``xxhash`` and ``cbor2`` packages."""
    try:
        import cbor2
        import xxhash as xxhash_module
    except ImportError as exc:
        raise ImportError(
            "hash function 'xxhash_cbor' needs the optional packages xxhash and cbor2 "
            "(pip install xxhash cbor2)"
        ) from exc
    digest: bytes = xxhash_module.xxh3_128_digest(cbor2.dumps(obj, canonical=True))
    return digest


def blake2b(obj: Any) -> bytes:
    """blake2b (16-byte digest) over pickle: a fast stdlib hash for large simulations.

    Not a vLLM option (pagedsim addition). Deterministic across processes, like all the
    functions here, because pickle of ints, bytes, str and tuples is deterministic.
    """
    return hashlib.blake2b(
        pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), digest_size=16
    ).digest()


_HASH_FNS: dict[str, HashFn] = {
    "sha256": sha256,
    "sha256_cbor": sha256_cbor,
    "xxhash": xxhash,
    "xxhash_cbor": xxhash_cbor,
    "blake2b": blake2b,
}


_HASH_FNS["fast"] = xxhash if importlib.util.find_spec("xxhash") is not None else blake2b


def get_hash_fn_by_name(hash_fn_name: str) -> HashFn:
    """Return the hash function called ``hash_fn_name``.

    Names: vLLM's ``sha256``, ``sha256_cbor``, ``xxhash`` and ``xxhash_cbor``, plus pagedsim's ``blake2b`` and
    ``fast`` (``xxhash`` when the package is installed, else ``blake2b``). Digests differ between
    functions, but block ids and hit lengths never depend on digest values.

    Raises:
        ValueError: for an unknown name.
    """
    try:
        return _HASH_FNS[hash_fn_name]
    except KeyError:
        known = ", ".join(sorted(_HASH_FNS))
        raise ValueError(f"unknown hash function {hash_fn_name!r}; known: {known}") from None
