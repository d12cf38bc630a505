"""pagedsim's side of the scheduler harness on minimal streams found against vLLM's scheduler.

Each stream is the smallest one that showed a divergence with EAGLE or draft-model
speculative decoding; the expected steps are what vLLM's own v1 Scheduler did on it
(``benchmarks/vllm_diff.py --scheduler --spec 2 --spec-method ...``): lookahead slots on a new
request's first chunk (0.23+), 0.33's drafting input slots for a draft model, 0.33's
placeholder padding under async when the running request's sampling step is still in flight,
and 0.33's EAGLE block hashes that cover the token after each block.
No vLLM is needed here.
"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

import pytest

from tests.benchkit import load_benchmark

FAMILY = list(range(1, 17))


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    load_benchmark("vllm_sched_stream")
    return load_benchmark("vllm_sched_pagedsim")


def stream(method: str, prompts: list[tuple[int, list[int]]], *, budget: int = 128,
           caching: bool = True, asynchronous: bool = False, steps: int = 1) -> dict[str, Any]:
    """A harness stream with K=2 drafts of ``method``: (arrival step, prompt) per request."""
    config = {"seed": 0, "block_size": 16, "num_blocks": 40, "max_num_seqs": 4,
              "max_num_batched_tokens": budget, "max_model_len": 1024, "chunked_prefill": True,
              "prefix_caching": caching, "policy": "fcfs", "spec": 2, "spec_method": method,
              "async": asynchronous, "num_steps": steps}
    requests = [{"id": f"r{i}", "arrival": arrival, "priority": 0, "prompt": prompt,
                 "max_tokens": 5, "outputs": list(range(8))}
                for i, (arrival, prompt) in enumerate(prompts)]
    return {"config": config, "requests": requests}


def steps(records: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    return [(r["scheduled"], r["blocks"]) for r in records]


@pytest.mark.parametrize(("version", "blocks"), [("0.19", [1, 2, 3, 4]),
                                                 ("0.33", [1, 2, 3, 4, 5])])
def test_first_chunk_reserves_lookahead_slots_from_0_23(harness: ModuleType, version: str,
                                                        blocks: list[int]) -> None:
    # 63 prompt tokens + 2 lookahead slots need a fifth block where the release reserves them
    run = harness.run_pagedsim(stream("draft_model", [(0, list(range(63)))]), version)
    assert steps(run) == [([["r0", 63]], {"r0": blocks})]


@pytest.mark.parametrize(("version", "second"), [("0.19", 24), ("0.33", 22)])
def test_draft_model_takes_an_input_slot_per_request_in_0_33(harness: ModuleType, version: str,
                                                             second: int) -> None:
    # 64-token budget: r0 takes 40 (+1 slot), r1 what is left less its own slot
    s = stream("draft_model", [(0, [1] * 40), (0, [2] * 40)], budget=64, caching=False)
    run = harness.run_pagedsim(s, version)
    assert run[0]["scheduled"] == [["r0", 40], ["r1", second]]


def test_async_pads_a_one_token_admission_beside_an_in_flight_decode(harness: ModuleType) -> None:
    # r0's prefill sampled in step 0, still in flight when step 1 is scheduled: it is no
    # prefill chunk, so r1 (a 16-token hit, one token left) is padded to 1 + K tokens
    s = stream("draft_model", [(0, FAMILY + [30]), (1, FAMILY + [31])], asynchronous=True,
               steps=3)
    run = harness.run_pagedsim(s, "0.33")
    assert steps(run) == [([["r0", 17]], {"r0": [1, 2]}),
                          ([["r0", 3], ["r1", 3]], {"r0": [1, 2], "r1": [1, 3]}),
                          ([["r0", 3], ["r1", 3]], {"r0": [1, 2], "r1": [1, 3]})]


def test_eagle_drops_the_last_block_of_a_prefix_hit(harness: ModuleType) -> None:
    # r1 shares r0's first 32 tokens: n-gram's hit is both blocks, EAGLE's only the first
    shared = list(range(32))
    prompts = [(0, shared + [40, 41]), (1, shared + [42, 43])]
    eagle = harness.run_pagedsim(stream("eagle", prompts, steps=2), "0.19")
    ngram = harness.run_pagedsim(stream("ngram", prompts, steps=2), "0.19")
    assert eagle[1]["scheduled"][-1] == ["r1", 34 - 16]
    assert ngram[1]["scheduled"][-1] == ["r1", 34 - 32]
    assert eagle[1]["blocks"]["r1"][0] == eagle[1]["blocks"]["r0"][0]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_eagle_hashes_look_ahead_in_0_33(harness: ModuleType, asynchronous: bool) -> None:
    # r1 shares r0's first 40 tokens: 0.33 hashes block 1 with token 32 (shared), so the hit
    # keeps it (32 tokens; vLLM 0.33.0 gave these steps, sync and async); 0.32 drops it
    shared = list(range(40))
    s = stream("eagle", [(0, shared + [50, 51]), (1, shared + [52, 53])], steps=3,
               asynchronous=asynchronous)
    assert steps(harness.run_pagedsim(s, "0.33")) == [
        ([["r0", 42]], {"r0": [1, 2, 3]}),
        ([["r0", 3], ["r1", 10]], {"r0": [1, 2, 3], "r1": [1, 2, 4]}),
        ([["r0", 3], ["r1", 3]], {"r0": [1, 2, 3, 5], "r1": [1, 2, 4]})]
    assert harness.run_pagedsim(s, "0.32")[1]["scheduled"][-1] == ["r1", 42 - 16]


@pytest.mark.parametrize(("after", "hit"), [(0, 32), (9, 16)])
def test_a_prompt_block_is_hashed_once_the_first_output_exists(harness: ModuleType, after: int,
                                                               hit: int) -> None:
    # r0's 32-token prompt: block 1's hash needs token 32, r0's first output (0); r1 arriving
    # later hits it only if its token 32 is that output too (vLLM 0.33.0's steps)
    shared = list(range(32))
    s = stream("eagle", [(0, shared), (2, shared + [after, 7, 8])], steps=4)
    run = harness.run_pagedsim(s, "0.33")
    assert run[2]["scheduled"] == [["r0", 3], ["r1", 35 - hit]]
    assert run[2]["blocks"]["r1"] == ([1, 2, 4] if hit == 32 else [1, 4, 5])


def test_async_refusal_follows_each_release(harness: ModuleType) -> None:
    diff = load_benchmark("vllm_sched_diff")

    def refused(method: str, version: str) -> bool:
        args = argparse.Namespace(spec=2, async_scheduling=True, spec_method=method, replay=None)
        return bool(diff.async_refusal(args, version))

    assert not refused("eagle", "0.14") and not refused("eagle", "0.33")
    assert refused("draft_model", "0.14") and not refused("draft_model", "0.19")
    assert refused("ngram", "0.33")
