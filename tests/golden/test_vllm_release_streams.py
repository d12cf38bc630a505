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
    "0.23": ("a45c3c1de7534696fc872b831b936bfc",
             {"ops": 3000, "hits": 224, "failed": 733, "errors": 67}),
    "0.27": ("d02f367d03344fc4b7a1f958f993ef17",
             {"ops": 3000, "hits": 136, "failed": 736, "errors": 67}),
    "0.33": ("4305e5912a26ee52f4d060075315b72e",
             {"ops": 3000, "hits": 114, "failed": 678, "errors": 65}),
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
