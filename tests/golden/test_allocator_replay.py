"""The paged allocator replays a seeded op stream exactly as the unoptimised version recorded."""

from __future__ import annotations

import json

import pytest

from allocator import KVCacheManager
from allocator.hashing import init_none_hash, sha256
from allocator.paged import PagedKVCacheManager
from tests.golden.allocator_replay import CONFIGS, GOLDEN_PATH, replay


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN_PATH.read_text())


@pytest.mark.parametrize("manager_class", [KVCacheManager, PagedKVCacheManager])
@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_replay_matches_golden(config, golden, manager_class) -> None:
    """Every block id, hit length, preemption, common-prefix count and the final queue match.

    The paged manager the simulator runs (fork, copy-on-write and swap added) must replay
    the stream exactly like vLLM's manager when none of those is used.
    """
    init_none_hash(sha256)
    result = json.loads(json.dumps(replay(config, manager_class)))
    expected = golden[config.name]
    assert len(result["log"]) == len(expected["log"])
    for idx, (got, want) in enumerate(zip(result["log"], expected["log"])):
        assert got == want, f"{config.name}: event {idx} differs"
    assert result["final_free_queue"] == expected["final_free_queue"]
    assert result["stats"] == expected["stats"]


def test_golden_stream_exercises_pressure(golden) -> None:
    """The recorded stream contains prefix hits, preemptions and blocked admissions."""
    for name, run in golden.items():
        kinds = {event[0] for event in run["log"]}
        assert {"admit", "run", "finish", "preempt", "blocked"} <= kinds, name
        if "no_caching" not in name:
            assert any(e[0] == "admit" and e[2] > 0 for e in run["log"]), name
