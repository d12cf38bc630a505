"""pagedsim under each release profile reproduces what that vLLM release's own block manager did.

The digests below were recorded by ``benchmarks/vllm_diff.py --ops 3000 --seed 7 --digest``
running vLLM's own ``KVCacheManager`` and ``Request`` (0.14.0, 0.19.0, 0.23.0, 0.27.0 and
0.33.0, each in its own venv) on the seeded operation stream. A digest covers, after every
operation, the call's result (hit length and ids, new block ids), the free count, the free-queue
order, every block's ref count and hash and every request's block table, so any difference in
free order, null-block accounting, hash keys, cascade prefixes, sliding-window caching, external
tokens, the admission gate or zero-token adoption changes it. No vLLM is needed here.
"""

from __future__ import annotations

import logging
from types import ModuleType

import pytest

from allocator.hashing import init_none_hash, sha256
from allocator.profiles import profile_for
from tests.benchkit import load_benchmark

SEED, NUM_OPS = 7, 3000

# version -> (digest, {ops, admissions with a hit, failed calls, errors}), recorded from vLLM.
VLLM_STREAMS = {
    "0.14": ("d112958c053fd5298dcf76337d437c93",
             {"ops": 3000, "hits": 243, "failed": 689, "errors": 67}),
    "0.19": ("b9b8ca6232751e17b3ff7fea94835cff",
             {"ops": 3000, "hits": 224, "failed": 364, "errors": 53}),
    "0.23": ("1bbbc6268ce8ee3738873b29eacdd24f",
             {"ops": 3000, "hits": 251, "failed": 720, "errors": 66}),
    "0.27": ("6ca8a9f052bf043f83d46bad6ad9ee41",
             {"ops": 3000, "hits": 207, "failed": 686, "errors": 65}),
    "0.33": ("fb7f2e7132ebb7e653f9d30c9944f280",
             {"ops": 3000, "hits": 171, "failed": 706, "errors": 60}),
}


@pytest.fixture(scope="module")
def diff() -> ModuleType:
    return load_benchmark("vllm_diff")


@pytest.mark.parametrize("version", sorted(VLLM_STREAMS))
def test_stream_matches_vllm(diff: ModuleType, version: str,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Every observation of the seeded stream equals the one vLLM ``version`` gave."""
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    init_none_hash(sha256)
    logging.getLogger("allocator").setLevel(logging.ERROR)
    observations = diff.pagedsim_stream(SEED, NUM_OPS, profile_for(version))
    digest, counts = VLLM_STREAMS[version]
    assert diff.summary(observations) == counts
    assert diff.digest(observations) == digest


def test_profiles_give_different_streams(diff: ModuleType,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded releases are told apart by the stream (each digest is distinct)."""
    assert len({digest for digest, _ in VLLM_STREAMS.values()}) == len(VLLM_STREAMS)
