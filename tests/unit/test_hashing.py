"""Unit tests for allocator/hashing.py: vLLM 0.14 block hashing (spec section 3)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from allocator import hashing
from allocator.hashing import (
    BlockHashListWithBlockSize,
    blake2b,
    generate_block_hash_extra_keys,
    get_block_hash,
    get_group_id,
    get_hash_fn_by_name,
    get_request_block_hasher,
    hash_block_tokens,
    init_none_hash,
    make_block_hash_with_group_id,
    sha256,
    sha256_cbor,
)
from allocator.profiles import profile_for
from allocator.request import Request

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def seed_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")


def test_sha256_vectors(seed_zero: None) -> None:
    """The spec's 3.4 sha256 vectors hold with PYTHONHASHSEED=0 and block size 16."""
    none_hash = init_none_hash(sha256)
    assert none_hash.hex() == "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c"
    h0 = hash_block_tokens(sha256, None, range(16))
    h1 = hash_block_tokens(sha256, h0, range(16, 32))
    assert h0.hex() == "6358e31578a64b75ebe28cdb99d3beae65de82a2087321dc6ec84ae048faaaa6"
    assert h1.hex() == "3c3c50f324aefbdfbb124dfdc541efac3e94e59c40f4be08afe70601eeca92c8"


def test_sha256_cbor_vectors(seed_zero: None) -> None:
    """The spec's 3.4 sha256_cbor vectors hold with PYTHONHASHSEED=0."""
    none_hash = init_none_hash(sha256_cbor)
    assert none_hash.hex() == "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e"
    h0 = hash_block_tokens(sha256_cbor, None, range(16))
    h1 = hash_block_tokens(sha256_cbor, h0, range(16, 32))
    assert h0.hex() == "d830de3d42c00f25a2949b5d12d98642664a44872c1614c5b0147556276afc9c"
    assert h1.hex() == "fedd9e4abebebbe6f6cf96b682f08d316063fe2f22a5c552192dd62904fcccac"


def test_sha256_is_pickle_protocol_5() -> None:
    """sha256 hashes the protocol-5 pickle of its argument."""
    import hashlib

    obj = (b"p", (1, 2), None)
    expected = hashlib.sha256(pickle.dumps(obj, protocol=5)).digest()
    assert sha256(obj) == expected


def test_sha256_cbor_missing_module_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without cbor2, sha256_cbor raises ImportError naming the package."""
    monkeypatch.setitem(sys.modules, "cbor2", None)
    with pytest.raises(ImportError, match="cbor2"):
        sha256_cbor((1, 2))


def test_none_hash_without_seed_is_random(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PYTHONHASHSEED the seed is 32 random bytes, different on each call."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    first, second = init_none_hash(sha256), init_none_hash(sha256)
    assert len(first) == 32 and first != second


def test_hash_block_tokens_needs_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashing a first block before init_none_hash raises a clear RuntimeError."""
    monkeypatch.setattr(hashing, "NONE_HASH", None)
    with pytest.raises(RuntimeError, match="init_none_hash"):
        hash_block_tokens(sha256, None, [1, 2])


def test_empty_parent_uses_seed(seed_zero: None) -> None:
    """A falsy parent (b'') is replaced by NONE_HASH, like None."""
    init_none_hash(sha256)
    assert hash_block_tokens(sha256, b"", [1, 2]) == hash_block_tokens(sha256, None, [1, 2])


@pytest.mark.parametrize("name", ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor", "blake2b",
                                  "fast"])
def test_hash_fns_deterministic_across_processes(name: str) -> None:
    """Each named hash function gives the same digest in a fresh interpreter."""
    fn = get_hash_fn_by_name(name)
    obj = (b"parent", (1, 2, 3), ("salt",))
    code = (
        "from allocator.hashing import get_hash_fn_by_name as g;"
        f"print(g({name!r})((b'parent', (1, 2, 3), ('salt',))).hex())"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "random"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == fn(obj).hex()


def test_blake2b_is_16_bytes() -> None:
    """The stdlib fast option returns a 16-byte digest."""
    assert len(blake2b((1, 2))) == 16


def test_unknown_hash_name() -> None:
    """An unknown hash name raises ValueError naming it."""
    with pytest.raises(ValueError, match="'md5'"):
        get_hash_fn_by_name("md5")


def test_group_id_key_round_trip() -> None:
    """The cache key is hash + 4 big-endian bytes of the group id, and splits back."""
    key = make_block_hash_with_group_id(b"\x01\x02", 258)
    assert key == b"\x01\x02\x00\x00\x01\x02"
    assert get_block_hash(key) == b"\x01\x02" and get_group_id(key) == 258


def test_extra_keys_salt_first_block_only() -> None:
    """The cache salt is an extra key of blocks starting at token 0 only (spec 3.6)."""
    request = Request("r", range(12), 4, cache_salt="salt")
    assert generate_block_hash_extra_keys(request, 0, 1) == (("salt",), 0)
    assert generate_block_hash_extra_keys(request, 0, 10) == (("salt",), 0)
    assert generate_block_hash_extra_keys(request, 1, 2) == (None, 0)
    assert generate_block_hash_extra_keys(request, 6, 10) == (None, 0)


def test_extra_keys_lora_then_salt() -> None:
    """LoRA name comes before the salt; no keys gives None."""
    request = Request("r", range(4), 4, lora_name="test_lora_adapter", cache_salt="s")
    assert generate_block_hash_extra_keys(request, 0, 4)[0] == ("test_lora_adapter", "s")
    assert generate_block_hash_extra_keys(request, 4, 8)[0] == ("test_lora_adapter",)
    assert generate_block_hash_extra_keys(Request("q", [1], 1), 0, 1)[0] is None


def test_request_hasher_chains_with_extra_keys(seed_zero: None) -> None:
    """Request hashes equal hash_block_tokens chained over full blocks with their extra keys."""
    init_none_hash(sha256)
    hasher = get_request_block_hasher(3, sha256)
    request = Request("r", range(7), 4, lora_name="lora", cache_salt="salt", block_hasher=hasher)
    h0 = hash_block_tokens(sha256, None, (0, 1, 2), ("lora", "salt"))
    h1 = hash_block_tokens(sha256, h0, (3, 4, 5), ("lora",))
    assert request.block_hashes == [h0, h1]


def test_salt_changes_only_through_chain(seed_zero: None) -> None:
    """Different salts give different hashes for every block of the same tokens."""
    init_none_hash(sha256)
    hasher = get_request_block_hasher(2, sha256)
    a = Request("a", range(6), 1, cache_salt="x", block_hasher=hasher)
    b = Request("b", range(6), 1, cache_salt="y", block_hasher=hasher)
    assert all(x != y for x, y in zip(a.block_hashes, b.block_hashes))
    assert len(a.block_hashes) == 3


def test_hasher_rejects_bad_block_size() -> None:
    """A block size below 1 raises ValueError naming it."""
    with pytest.raises(ValueError, match="0"):
        get_request_block_hasher(0, sha256)


def test_block_hash_list_with_block_size() -> None:
    """Large-block hashes are the byte concatenation of the small ones (0.14)."""
    view = BlockHashListWithBlockSize([b"a", b"b", b"c", b"d", b"e"], 4, 8)
    assert len(view) == 2
    assert view[0] == b"ab" and view[1] == b"cd"
    with pytest.raises(IndexError):
        view[2]
    with pytest.raises(ValueError):
        BlockHashListWithBlockSize([], 4, 6)


# Block hashes of tokens [1..9] at block size 4 with PYTHONHASHSEED=0, recorded from vLLM's own
# get_request_block_hasher + Request (0.14.0 and 0.33.0). "" shares the unsalted hashes.
VLLM_HASHES = {
    ("0.14", None, None): ("762b2e7e1520febd3a0aedb7358e8602facf3924440e18538fce057e23bae91d",
                           "9e62b5a7ec298f33cb4c7d9e00b659874bb2432d23ad6879ad1746592a2b036b"),
    ("0.14", "s1", None): ("de73592a2bd9baf653a4998920440855b93469c73d62ec69ac9dd3a01f8f2427",
                           "53a873f3c8277693d9575b3df7857c64de2af5ba4fe43023370bb22121e33126"),
    ("0.14", None, "a"): ("a3c11c9e3bcd3f1f48e19baa3dd9cbfa730be7611e2c616ba1ea773a2ed5f2ce",
                          "8e0855a3fde07a6efd01cc9187947f2b80fe33ad42d8e975e751dad540843caf"),
    ("0.14", "s1", "a"): ("05c03718f550ebe900b9426f6555c9852bcdbde71748f6709a4adcc0c049c8c5",
                          "7f6f2df17cf9394a7b5afed0d27f1e43176775269e019d55bcc078315e551e8a"),
    ("0.33", "s1", None): ("a7e35e311104d2c478b3bf3aa5ee44a86ebac9eda9a1ec66787a6aad151115ab",
                           "9ddbb8233cf757fc7304341ac6202c062b59f54911689e381514749babb02fd3"),
    ("0.33", None, "a"): ("06ec2e7a94f9871a23c33a7c4d18638b023e41a2279465a721749b4ab70464a4",
                          "7dfdc19cab958c814871138c8e8a5a96fad519bfb11a91bf8e2285be110b2561"),
    ("0.33", "s1", "a"): ("2c1b92830f4ab7fbe0febaca4f48fc6453796623aec5dfa0ef51c78e08d63e3e",
                          "b8bdc51b4c4ea1d33b1914910e3959ddd0054f1582fafd6ccb1bf8f36e1fa353"),
}
VLLM_HASHES[("0.33", None, None)] = VLLM_HASHES[("0.14", None, None)]


def _vllm_request_hashes(version: str, salt: str | None, lora: str | None) -> list[str]:
    init_none_hash(sha256)
    hasher = get_request_block_hasher(4, sha256, profile_for(version).extra_keys)
    request = Request("r", range(1, 10), 4, cache_salt=salt, lora_name=lora,
                      lora_path=None if lora is None else f"/p/{lora}", block_hasher=hasher)
    return [h.hex() for h in request.block_hashes]


@pytest.mark.parametrize("key", sorted(VLLM_HASHES, key=str))
def test_hashes_recorded_from_vllm(seed_zero: None, key: tuple[str, str | None, str | None]) -> None:
    """Salted and LoRA block hashes equal vLLM's: plain keys in 0.14, tagged in 0.33 (C3)."""
    assert tuple(_vllm_request_hashes(*key)) == VLLM_HASHES[key]


@pytest.mark.parametrize("version", ["0.14", "0.33"])
def test_empty_cache_salt_is_unsalted(seed_zero: None, version: str) -> None:
    """cache_salt="" adds no extra key (vLLM tests truthiness), so it shares the cache."""
    assert tuple(_vllm_request_hashes(version, "", None)) == VLLM_HASHES[(version, None, None)]
    request = Request("r", range(4), 4, cache_salt="")
    assert generate_block_hash_extra_keys(request, 0, 4) == (None, 0)
    assert generate_block_hash_extra_keys(request, 0, 4, extra_keys="tagged") == (None, 0)


def test_tagged_extra_keys() -> None:
    """The 0.31+ format tags each key: ("lora", name, path), then ("cache_salt", salt)."""
    request = Request("r", range(8), 4, lora_name="a", lora_path="/p/a", cache_salt="s")
    keys = generate_block_hash_extra_keys(request, 0, 4, extra_keys="tagged")[0]
    assert keys == (("lora", "a", "/p/a"), ("cache_salt", "s"))
    assert generate_block_hash_extra_keys(request, 4, 8, extra_keys="tagged")[0] == (
        ("lora", "a", "/p/a"),)


def test_fixed_none_hash_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unseeded, 0.29+ derives NONE_HASH from "vllm-none-hash" (values from vLLM 0.33.0,
    two processes); xxhash keeps a random seed; 0.14's rule stays random (C9)."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    assert init_none_hash(sha256, "fixed").hex() == (
        "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198")
    assert init_none_hash(sha256_cbor, "fixed").hex() == (
        "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0")
    assert init_none_hash(sha256, "random") != init_none_hash(sha256, "random")
    with pytest.raises(ValueError, match="none_hash_seed"):
        init_none_hash(sha256, "sometimes")


def test_xxhash_cbor_is_xxh3_128_over_canonical_cbor() -> None:
    """vLLM's xxhash_cbor: xxh3_128 of the canonical CBOR encoding (16 bytes), not of pickle."""
    cbor2 = pytest.importorskip("cbor2")
    xxhash = pytest.importorskip("xxhash")
    obj = (b"parent", (1, 2, 3), None)
    digest = get_hash_fn_by_name("xxhash_cbor")(obj)
    assert digest == xxhash.xxh3_128_digest(cbor2.dumps(obj, canonical=True))
    assert digest != get_hash_fn_by_name("xxhash")(obj) and len(digest) == 16


# Lookahead hashes (vLLM 0.33, EAGLE): tokens 10..21 at block size 4, then outputs 7 and 8
# appended one at a time, PYTHONHASHSEED=0; the first 8 hex digits of every hash after the
# prompt and after each append, recorded from vLLM 0.33.0's get_request_block_hasher(4,
# sha256, L) + Request (salt "s", LoRA "a" at "/p/a"). Block 2 appears once token 12 (L=1) or
# tokens 12-13 (L=2) exist.
VLLM_LOOKAHEAD = {
    (1, None, None): ("4a5dd665", "53116df2", "cf72ecdc"),
    (1, "s", None): ("c7574117", "8b4b2fdd", "6dd2fdc1"),
    (1, None, "a"): ("022cdab2", "f70e58e0", "d227ac01"),
    (1, "s", "a"): ("0aa82584", "ea422881", "75b7e535"),
    (2, None, None): ("d4a4c7e2", "358f4619", "fc516f96"),
    (2, "s", None): ("9faea121", "6b7a8cf1", "a69658dd"),
    (2, None, "a"): ("4a0c1cec", "a448599e", "ae0e606c"),
    (2, "s", "a"): ("b3d8dbf1", "57e9be2b", "5e869cbd"),
}


@pytest.mark.parametrize("key", sorted(VLLM_LOOKAHEAD, key=str))
def test_lookahead_hashes_recorded_from_vllm(
    seed_zero: None, key: tuple[int, str | None, str | None]
) -> None:
    """Each block's hash also covers the L tokens after it, as extra keys (keys, *tokens),
    byte for byte as vLLM 0.33's; it appears only once those tokens exist."""
    lookahead, salt, lora = key
    init_none_hash(sha256)
    hasher = get_request_block_hasher(4, sha256, "tagged", lookahead)
    request = Request("r", range(10, 22), 8, cache_salt=salt, lora_name=lora,
                      lora_path=None if lora is None else f"/p/{lora}", block_hasher=hasher)
    seen = [[h.hex()[:8] for h in request.block_hashes]]
    for token in (7, 8):
        request.append_output_token_ids(token)
        seen.append([h.hex()[:8] for h in request.block_hashes])
    want = list(VLLM_LOOKAHEAD[key])
    assert seen == [want[:2], want[: 2 if lookahead == 2 else 3], want]


def test_lookahead_extra_keys_and_hashable_blocks() -> None:
    """(keys, next) for one token, (keys, *next) for more; a block counts once its lookahead
    tokens exist."""
    tokens = list(range(10))
    assert hashing.lookahead_extra_keys(None, tokens, 4, 1) == (None, 4)
    assert hashing.lookahead_extra_keys(("s",), tokens, 4, 2) == (("s",), 4, 5)
    assert [hashing.num_hashable_blocks(n, 4, 1) for n in (0, 4, 5, 8, 9)] == [0, 0, 1, 1, 2]
    assert hashing.num_hashable_blocks(8, 4) == 2
    with pytest.raises(ValueError, match="lookahead"):
        get_request_block_hasher(4, sha256, "plain", -1)
