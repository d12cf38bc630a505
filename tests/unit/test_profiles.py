"""Unit tests for allocator/profiles.py: the release table, overrides, and one test per
behaviour class built from its minimal sequence, asserting the outputs vLLM gave.

Each sequence is an episode for ``benchmarks/vllm_diff_ops.py``'s executor (the one
``vllm_diff.py`` drives vLLM with), so the same episodes were replayed through vLLM 0.14.0,
0.19.0, 0.23.0, 0.27.0 and 0.33.0 themselves (``vllm_diff.py --replay``); the expected values
below are what those releases returned.
"""

from __future__ import annotations

from typing import Any

import pytest

from allocator.profiles import (
    CHANGES,
    VERSIONS,
    VllmProfile,
    apply_overrides,
    distinct_profiles,
    num_hash_lookahead_tokens,
    parse_override,
    profile_for,
)
from tests.benchkit import load_benchmark

OPS = load_benchmark("vllm_diff_ops")
STREAM = load_benchmark("vllm_diff_stream")


def config(num_blocks: int, bs: int, window: int | None = None, caching: bool = True,
           retention: Any = "default", version: str = "0.14") -> dict[str, Any]:
    if retention == "default":
        retention = profile_for(version).prefix_cache_retention_interval
    return {"num_blocks": num_blocks, "block_size": bs, "sliding_window": window,
            "caching": caching, "max_model_len": 64, "retention": retention,
            "watermark": 0.0, "max_in_flight_tokens": None}


def admit(rid: str, tokens: list[int], chunk: int = 64, **kw: Any) -> dict[str, Any]:
    return {"op": "admit", "slot": 0, "rid": rid, "tokens": tokens, "chunk": chunk, **kw}


def op(kind: str, slot: int = 0, **kw: Any) -> dict[str, Any]:
    return {"op": kind, "slot": slot, **kw}


def run(version: str, cfg: dict[str, Any], ops: list[dict[str, Any]]) -> list[Any]:
    """Observations: [result, free count, queue, ref counts, hashes, tables] per op."""
    backend = STREAM.PagedsimBackend(profile_for(version))
    return OPS.Executor(backend, cfg).run(ops)  # type: ignore[no-any-return]


SEQUENCES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "P1": (config(5, 4), [admit("r0", [1, 2, 3, 4, 5, 6]), op("free"),
                          admit("r1", [7, 7, 7, 7, 7])]),
    "P1b": (config(5, 4, caching=False), [admit("r0", [1] * 8), admit("r1", [2] * 4),
                                          op("free"), op("free")]),
    "P2": (config(8, 2, window=2), [admit("r0", list(range(9))), admit("r1", list(range(9))),
                                    op("free"), op("free")]),
    "P4": (config(10, 2), [admit("r0", [1, 2, 3, 4, 5]), admit("r1", [1, 2, 3, 4, 9]),
                           op("prefix")]),
    "P5": (config(8, 2, window=1), [admit("r0", list(range(8))), op("free"),
                                    admit("r1", list(range(8)))]),
    "P6": (config(8, 2, window=1, caching=False), [admit("r0", [1, 2, 3], chunk=0, ext=1,
                                                         delay=True)]),
    "P7": (config(4, 4), [admit("r0", list(range(16)), chunk=4, gate=True)]),
    "P8": (config(8, 4), [admit("r0", list(range(9))), op("free"),
                          {**admit("r1", list(range(9))), "op": "zero"}]),
}


def sequence_p5b(version: str) -> list[Any]:
    cfg = config(16, 2, window=4, version=version)
    ops = [admit("r0", list(range(13)))] + [op("step", token=1, chunk=1)] * 3
    ops += [op("free"), admit("r1", list(range(13)))]
    return run(version, cfg, ops)


def hashed(obs: list[Any]) -> list[int]:
    return [i for i, h in enumerate(obs[4]) if h is not None]


@pytest.mark.parametrize(("version", "queue", "next_ids"), [
    ("0.14", [3, 4, 2, 1], [3, 4]), ("0.19", [3, 4, 2, 1], [3, 4]),
    ("0.33", [2, 3, 4, 1], [2, 3]),
])
def test_c1_free_order(version: str, queue: list[int], next_ids: list[int]) -> None:
    """P1: a freed partial block goes to the queue front from 0.24 (hashed block 1 stays LRU)."""
    obs = run(version, *SEQUENCES["P1"])
    assert obs[0][0] == [0, [], [1, 2]]
    assert obs[1][2] == queue
    assert obs[2][0][2] == next_ids


@pytest.mark.parametrize(("version", "queue"), [
    ("0.14", [4, 2, 1, 3]), ("0.23", [4, 2, 1, 3]), ("0.27", [4, 2, 1, 3]),
    ("0.28", [3, 2, 1, 4]), ("0.33", [3, 2, 1, 4]),
])
def test_c1_free_order_caching_off(version: str, queue: list[int]) -> None:
    """P1b: with caching off 0.24+ reuses freed blocks LIFO; 0.27 appends (its regression)."""
    assert run(version, *SEQUENCES["P1b"])[-1][2] == queue


def test_c1_swa_split_0_23() -> None:
    """0.23 prepends only the sliding window's unhashed frees; full attention still appends."""
    assert run("0.23", *SEQUENCES["P1"])[1][2] == [3, 4, 2, 1]
    obs = run("0.23", *SEQUENCES["P2"])
    assert obs[-1][2][:2] == [6, 5]  # r1's unhashed tail block 6 and block 5 went first


@pytest.mark.parametrize(("version", "null_ref"), [("0.14", -3), ("0.32", -3), ("0.33", 0)])
def test_c2_null_block_ref_cnt(version: str, null_ref: int) -> None:
    """P2: the second request hits [0, 0, 0, 4]; the null block's ref_cnt drifts until 0.33."""
    obs = run(version, *SEQUENCES["P2"])
    assert obs[1][0][:2] == [8, [0, 0, 0, 4]]
    assert obs[1][5]["r1"] == [0, 0, 0, 4, 6]
    assert obs[-1][3][0] == null_ref


@pytest.mark.parametrize(("version", "common"), [("0.14", [2]), ("0.31", [2]), ("0.32", [0])])
def test_c4_cascade_prefix(version: str, common: list[int]) -> None:
    """P4: two requests sharing 2 full blocks: cascade prefix [2] until 0.32, then [0]."""
    assert run(version, *SEQUENCES["P4"])[-1][0] == common


@pytest.mark.parametrize(("version", "hashed_ids", "hit"), [
    ("0.14", [1, 2, 3, 4], 6), ("0.22", [1, 2, 3, 4], 6), ("0.23", [], 0), ("0.33", [], 0),
])
def test_c5_window_one_caches_nothing(version: str, hashed_ids: list[int], hit: int) -> None:
    """P5: sliding window 1: dense hashing until 0.22; from 0.23 no block can serve a hit."""
    obs = run(version, *SEQUENCES["P5"])
    assert hashed(obs[1]) == hashed_ids
    assert obs[2][0][0] == hit


@pytest.mark.parametrize(("version", "after_prompt", "after_decode"), [
    ("0.14", [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7, 8]),
    ("0.29", [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7, 8]),
    ("0.30", [5, 6], [5, 6]), ("0.33", [5, 6], [5, 6]),
])
def test_c5_retention_zero(version: str, after_prompt: list[int],
                           after_decode: list[int]) -> None:
    """P5b: with retention 0 (0.30+) only the window before the replay boundary is hashed."""
    obs = sequence_p5b(version)
    assert hashed(obs[0]) == after_prompt
    assert hashed(obs[3]) == after_decode
    assert obs[-1][0][:2] == [12, [0, 0, 0, 0, 5, 6]]


@pytest.mark.parametrize(("version", "returned"), [("0.14", []), ("0.23", []), ("0.24", [1])])
def test_c6_external_clamp(version: str, returned: list[int]) -> None:
    """P6: a sub-block skip clamps the external token from 0.24; its block moves to stage 3."""
    obs = run(version, *SEQUENCES["P6"])
    assert obs[0][0][2] == returned
    assert obs[0][5]["r0"] == [1]


@pytest.mark.parametrize(("version", "result"), [
    ("0.14", [0, [], [1]]), ("0.18", [0, [], [1]]), ("0.19", [0, [], "gated"]),
    ("0.21", [0, [], None]), ("0.33", [0, [], None]),
])
def test_c7_full_sequence_gate(version: str, result: list[Any]) -> None:
    """P7: a 16-token prompt in a 3-block pool: admitted chunk by chunk until 0.18, refused
    from 0.19 (``can_fit_full_sequence``) and 0.21 (``full_sequence_must_fit``)."""
    assert run(version, *SEQUENCES["P7"])[0][0] == result


@pytest.mark.parametrize(("version", "result"), [
    ("0.14", "error:ValueError"), ("0.30", "error:ValueError"), ("0.31", [8, [1, 2], []]),
])
def test_c8_zero_token_adoption(version: str, result: Any) -> None:
    """P8: allocate_slots(num_new_tokens=0) that adopts a hit is accepted from 0.31."""
    obs = run(version, *SEQUENCES["P8"])
    assert obs[-1][0] == result
    if version == "0.31":
        assert obs[-1][5]["r1"] == [1, 2]


def test_every_release_has_a_profile() -> None:
    """0.14 ... 0.33 each resolve; patch releases and a leading v are accepted."""
    assert VERSIONS[0] == "0.14" and VERSIONS[-1] == "0.33" and len(VERSIONS) == 20
    assert profile_for("v0.33.1") == profile_for("0.33")
    for release in ("0.15", "0.16", "0.17", "0.18"):
        assert profile_for(release).replace(version="0.14") == VllmProfile()
    assert profile_for("0.27").free_order == "lifo_cached_only"
    assert profile_for("0.28").free_order == "lifo_unhashed"
    with pytest.raises(ValueError, match="known: 0.14 ... 0.33"):
        profile_for("0.13")


def test_release_table_is_ordered_and_effective() -> None:
    """Each row of the table changes at least one switch of the release before it."""
    releases = [release for release, _ in CHANGES]
    assert releases == sorted(releases, key=lambda v: int(v.split(".")[1]))
    for release, changes in CHANGES:
        before = profile_for(f"0.{int(release.split('.')[1]) - 1}")
        assert any(getattr(before, k) != v for k, v in changes.items()), release


def test_overrides() -> None:
    """A single switch can be replaced, by keyword or by NAME=VALUE text, and is validated."""
    profile = profile_for("0.33").replace(free_order="append")
    assert profile.free_order == "append" and profile.null_block_ref_cnt == "untracked"
    parsed = apply_overrides(profile_for("0.33"), ["zero_token_adopt=false",
                                                   "prefix_cache_retention_interval=none",
                                                   "watermark=0.1"])
    assert (parsed.zero_token_adopt, parsed.prefix_cache_retention_interval,
            parsed.watermark) == (False, None, 0.1)
    assert parse_override("prefix_cache_retention_interval=32") == (
        "prefix_cache_retention_interval", 32)
    for bad in ("free_order", "nope=1", "free_order=fifo", "zero_token_adopt=maybe"):
        with pytest.raises(ValueError):
            apply_overrides(VllmProfile(), [bad])


def test_distinct_profiles_and_describe() -> None:
    """Distinct allocator-switch sets start at the releases that change them."""
    versions = [p.version for p in distinct_profiles()]
    assert versions[:3] == ["0.14", "0.19", "0.20"] and "0.27" in versions
    assert "0.15" not in versions and versions[-1] == "0.33"
    assert profile_for("0.14").describe() == "vLLM 0.14 profile: 0.14 behaviour"
    assert "null_block_ref_cnt='untracked'" in profile_for("0.33").describe()


def test_spec_and_async_switches_by_release() -> None:
    """Output caching and draft padding: as read in vLLM 0.14, 0.19, 0.23, 0.27 and 0.33."""
    assert [profile_for(v).output_caching for v in ("0.14", "0.27", "0.32", "0.33")] == [
        "async", "async", "async", "async_or_spec"]
    assert [profile_for(v).draft_padding for v in ("0.14", "0.26", "0.27", "0.32", "0.33")] == [
        "none", "none", "with_running", "with_running", "with_running_or_hit"]
    with pytest.raises(ValueError, match="draft_padding"):
        VllmProfile(draft_padding="always")


def test_hash_lookahead_by_release_and_method() -> None:
    """Lookahead hashes from 0.33 (absent from 0.28-0.32's source), for EAGLE with prefix
    caching on only; ``hash_lookahead=false`` is vLLM's ``disable_lookahead_block_hashes``."""
    assert [profile_for(v).hash_lookahead for v in ("0.14", "0.32", "0.33")] == [
        False, False, True]
    v033 = profile_for("0.33")
    assert num_hash_lookahead_tokens(v033, "eagle", True) == 1
    assert num_hash_lookahead_tokens(v033, "eagle", False) == 0
    assert num_hash_lookahead_tokens(v033, "draft_model", True) == 0
    assert num_hash_lookahead_tokens(v033, None, True) == 0
    assert num_hash_lookahead_tokens(profile_for("0.32"), "eagle", True) == 0
    off = apply_overrides(v033, ["hash_lookahead=false"])
    assert num_hash_lookahead_tokens(off, "eagle", True) == 0
