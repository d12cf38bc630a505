"""The benchmark stream hands out the block ids that vLLM 0.14.0's own manager handed out.

The digests below were recorded by ``benchmarks/bench_allocator.py --vllm`` running vLLM
0.14.0's ``KVCacheManager`` and ``Request`` (from the unpacked wheel) on the same synthetic
stream. A digest covers every admission's full block table and every newly allocated block id,
in order, so any difference in block ids, hit lengths, eviction or free-queue order changes it.
The 1,024-block pool forces preemption (recompute) and prefix hits on re-admission.
"""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from tests.benchkit import load_benchmark

# (num_blocks, caching) -> (digest, token-steps, preemptions, hit tokens), recorded from vLLM.
VLLM_0_14_0 = {
    (16_384, True): ("6b2dcba91a01aac4ee0f2cebf7f5f10c", 76_224, 0, 76_288),
    (16_384, False): ("b20ade21905f81a1283d5d4f694ce304", 76_224, 0, 0),
    (1_024, True): ("fe348d96ab379687df0ffcce66553b0b", 76_216, 73, 156_304),
    (1_024, False): ("784271f6546118258193684b213b2c42", 76_218, 45, 0),
    (3_000, True): ("16d5002eb4b4272eecf42bdac378c2f3", 76_224, 62, 134_224),
}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("bench_allocator")


@pytest.fixture(scope="module")
def stream(bench: ModuleType) -> tuple[list[list[int]], list[int]]:
    rows = bench.synthetic_rows(300, seed=0)
    return bench.build_prompts(rows, seed=0), [generated for _, generated in rows]


@pytest.mark.parametrize(("num_blocks", "caching"), sorted(VLLM_0_14_0))
def test_stream_matches_vllm(bench, stream, num_blocks: int, caching: bool) -> None:
    """Same block ids, hits and preemptions as vLLM 0.14.0, with and without caching."""
    bench.init_none_hash(bench.sha256)
    prompts, outputs = stream
    result = bench.run_stream(prompts, outputs, caching, digest=True, num_blocks=num_blocks)
    digest, token_steps, preemptions, hit_tokens = VLLM_0_14_0[(num_blocks, caching)]
    assert (result.token_steps, result.preemptions, result.hit_tokens) == (
        token_steps,
        preemptions,
        hit_tokens,
    )
    assert result.digest == digest


def test_vllm_flag_without_vllm_exits(bench, stream, monkeypatch) -> None:
    """``--vllm`` without an importable vllm stops with a one-line message."""
    monkeypatch.setitem(sys.modules, "vllm", None)
    prompts, outputs = stream
    with pytest.raises(SystemExit, match="--vllm needs an importable vllm"):
        bench.run_stream(prompts[:2], outputs[:2], True, vllm=True)
