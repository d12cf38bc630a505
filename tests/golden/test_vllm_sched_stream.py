"""pagedsim's scheduler takes the steps vLLM 0.14.0's v1 Scheduler took on two arrival streams.

``vllm_sched_0_14_seedS.json`` was recorded by ``benchmarks/vllm_diff.py --scheduler
--vllm-python PY --steps 200 --seed S --record FILE`` with vLLM 0.14.0: 200 fcfs steps with
chunked prefill and a pool that forces recompute preemption; seed 2 with prefix caching and a
160-token model length (outputs cut there), seed 5 without caching and with a preemption right
before a request could have been admitted. Each step's record holds the scheduled requests and
token counts, admissions, preemption victims, finishes and every running request's block ids.
``vllm_sched_0_33_async_seed0.json`` and ``vllm_sched_0_33_spec2_seedS.json`` were recorded
the same way from vLLM 0.33.0 with ``--async`` and ``--spec 2`` (200 steps): blocks cached by
a finishing request's last output (the 0.24+ free order shows them), ngram drafts with
placeholder padding of new decodes (seed 0), and no drafts for a request whose recompute
after preemption ends one token short (seed 3). ``vllm_sched_0_33_eagle2*_seed3.json`` and
``vllm_sched_0_33_draft2*_seed0.json`` were recorded from vLLM 0.33.0 with ``--spec 2
--spec-method eagle`` / ``draft_model``, with and without ``--async``: lookahead slots from a
request's first chunk (seed 3 has no prefix caching), a draft model's input slot per scheduled
request, and placeholder padding beside in-flight decodes. ``vllm_sched_0_33_eagle2_cached*
_seed0.json`` were recorded the same way with ``--spec 2 --spec-method eagle --seed 0`` (prefix
caching on), with and without ``--async``: 0.33's EAGLE block hashes cover the token after each
block, and prefix hits keep their last block (pagedsim's legacy hashes and drop diverge at
steps 17 and 18).
No vLLM is needed here.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.benchkit import load_benchmark

GOLDEN = Path(__file__).resolve().parent
SEEDS = (2, 5)


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    load_benchmark("vllm_sched_stream")
    load_benchmark("vllm_sched_pagedsim")
    return load_benchmark("vllm_sched_diff")


@pytest.fixture(scope="module", params=SEEDS)
def golden(request: pytest.FixtureRequest) -> dict[str, Any]:
    path = GOLDEN / f"vllm_sched_0_14_seed{request.param}.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_streams_exercise_preemption_chunking_and_prefix_hits(golden: dict[str, Any]) -> None:
    records = golden["records"]
    config = golden["stream"]["config"]
    assert len(records) == 200
    assert sum(len(r["preempted"]) for r in records) >= 10
    budget = config["max_num_batched_tokens"]
    assert sum(1 for r in records if sum(n for _, n in r["scheduled"]) == budget) >= 10
    shared = [r for r in records
              if len({b for t in r["blocks"].values() for b in t})
              < sum(len(t) for t in r["blocks"].values())]
    assert (len(shared) >= 10) == config["prefix_caching"]


def test_pagedsim_matches_vllm_step_by_step(harness: ModuleType,
                                            golden: dict[str, Any]) -> None:
    ours = harness.run_pagedsim(golden["stream"], "0.14")
    theirs = golden["records"]
    step = harness.first_divergence(ours, theirs)
    detail = "" if step < 0 else f"step {step}: pagedsim {ours[step]} vllm {theirs[step]}"
    assert step == -1, detail


def test_a_changed_record_is_a_divergence(harness: ModuleType, golden: dict[str, Any]) -> None:
    theirs = json.loads(json.dumps(golden["records"]))
    step = next(i for i, r in enumerate(theirs) if r["preempted"])
    theirs[step]["preempted"].reverse()
    theirs[step]["preempted"].append("r0")
    ours = harness.run_pagedsim(golden["stream"], "0.14")
    assert harness.first_divergence(ours, theirs) == step
    config = golden["stream"]["config"]
    assert harness.classify(config, ours[step], theirs[step]) == "recompute preemption"


@pytest.mark.parametrize("name", ["vllm_sched_0_33_async_seed0", "vllm_sched_0_33_spec2_seed0",
                                  "vllm_sched_0_33_spec2_seed3", "vllm_sched_0_33_eagle2_seed3",
                                  "vllm_sched_0_33_eagle2_async_seed3",
                                  "vllm_sched_0_33_draft2_seed0",
                                  "vllm_sched_0_33_draft2_async_seed0",
                                  "vllm_sched_0_33_eagle2_cached_seed0",
                                  "vllm_sched_0_33_eagle2_cached_async_seed0"])
def test_pagedsim_matches_vllm_0_33_async_and_spec(harness: ModuleType, name: str) -> None:
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    ours = harness.run_pagedsim(golden["stream"], "0.33")
    step = harness.first_divergence(ours, golden["records"])
    detail = "" if step < 0 else f"step {step}: pagedsim {ours[step]} vllm {golden['records'][step]}"
    assert step == -1, detail
