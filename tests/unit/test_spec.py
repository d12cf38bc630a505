"""Speculative decoding in the scheduler (sim/sched/spec.py, sim/sched/async_sched.py): token
counts per step with K drafts, acceptance, lookahead slots, the rollback of rejected drafts
(prefix-cache coverage), EAGLE's dropped hit block (kept with 0.33's lookahead hashes), and
the seeded acceptance draws."""
from __future__ import annotations

from typing import Any

import pytest

from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.kv_cache_manager import KVCacheManager
from allocator.kv_cache_spec import KVCacheConfig
from allocator.profiles import profile_for
from allocator.request import Request
from sim.cost.spec_cost import SpecConfig
from sim.engine import _make_manager
from sim.results.metrics import RunLog
from sim.sched.plan import StepPlan
from sim.sched.scheduler import Scheduler
from sim.workload.block_hash import make_hasher
from sim.workload.workload import Workload
from tests.unit.simkit import make_trace, rows, run_config, simulate, steps
from traces import add_system_prompt
from traces.datasets import random_dataset
from traces.model import Trace
from traces.records import TraceRequest


def spec_options(method: str = "ngram", k: int = 3, rate: float = 1.0,
                 **extra: Any) -> dict[str, Any]:
    rates = extra.pop("acceptance", (rate,) * k)
    return {"spec": SpecConfig(method, k), "acceptance": rates, **extra}


def step_tokens(result: Any) -> list[int]:
    cols = steps(result)
    return [p + d for p, d in zip(cols["prefill_tokens"], cols["decode_tokens"])]


def test_all_accepted_gives_k_plus_one_tokens_per_step() -> None:
    """Prompt 32, output 9, K=3, every draft accepted: a 32-token prefill samples 1, then two
    verify steps of 1 + 3 tokens each add 4 outputs."""
    result = simulate(make_trace([(0.0, 32, 9)]), **spec_options())
    assert step_tokens(result) == [32, 4, 4]
    assert result.counters["mean_acceptance_length"] == 4.0


def test_all_rejected_gives_one_output_per_step() -> None:
    """Acceptance 0: each verify step still schedules 1 + K tokens but adds one output."""
    result = simulate(make_trace([(0.0, 32, 5)]), **spec_options(rate=0.0))
    assert step_tokens(result) == [32, 4, 4, 4, 4]
    assert result.counters["mean_acceptance_length"] == 1.0
    assert result.counters["num_draft_tokens"] == 12


def test_per_position_rates_stop_at_the_first_rejection() -> None:
    """Rates (1, 0, 1): the first draft is always accepted, the second never, so the third
    never counts: two outputs per verify step."""
    result = simulate(make_trace([(0.0, 32, 7)]), **spec_options(acceptance=(1.0, 0.0, 1.0)))
    assert step_tokens(result) == [32, 4, 4, 4]
    assert result.counters["mean_acceptance_length"] == 2.0


def test_drafts_clamped_by_the_token_budget_and_max_model_len() -> None:
    """max_model_len 40, prompt 34 (output truncated to 6): positions stop at 39, so the
    verify steps get 4, then what is left below the limit."""
    result = simulate(make_trace([(0.0, 34, 6)]), max_model_len=40, **spec_options())
    tokens = step_tokens(result)
    assert tokens[0] == 34 and max(tokens[1:]) <= 4
    assert sum(tokens) <= 39


def test_seeded_acceptance_is_deterministic_and_seed_dependent() -> None:
    trace = make_trace([(0.0, 32, 40), (0.0, 48, 40)])
    runs = [simulate(trace, seed=s, **spec_options(rate=0.6)) for s in (0, 0, 1)]
    lengths = [r.counters["num_accepted_tokens"] for r in runs]
    assert lengths[0] == lengths[1]
    assert step_tokens(runs[0]) == step_tokens(runs[1])
    assert step_tokens(runs[0]) != step_tokens(runs[2])


def test_lookahead_slots_take_a_block_and_are_counted() -> None:
    """Prompt 27, K=3: the first verify step computes 27..30 (2 blocks); 3 lookahead slots
    reach position 33, a third block (the prefill and the second verify step, 31..34, hold
    none beyond their tokens): 1/3 block per step on average."""
    trace = make_trace([(0.0, 27, 8)])
    plain = simulate(trace, **spec_options())
    ahead = simulate(trace, **spec_options(num_lookahead_tokens=3))
    assert plain.counters["mean_draft_blocks_held"] == 0.0
    assert ahead.counters["mean_draft_blocks_held"] == pytest.approx(1 / 3)
    free_plain, free_ahead = steps(plain)["free"], steps(ahead)["free"]
    assert free_ahead[1] == free_plain[1] - 16


def scheduler(trace: Any, caching: bool = True, **options: Any) -> Scheduler:
    config = run_config(**options)
    manager = _make_manager("paged", config, caching)
    if config.scheduler.use_eagle:
        manager.use_eagle = True  # type: ignore[attr-defined]
    workload = Workload(trace, config, make_hasher(16, "fast"))
    sched = Scheduler(manager, config, workload, RunLog(len(trace)))
    for index in range(len(trace)):
        sched.admission.add_group(workload.make_group(index))
    return sched


def drive(sched: Any, arrivals: dict[int, int], num_steps: int,
          overlap: bool = False) -> list[dict[str, Any]]:
    """Step ``sched`` as vLLM's engine does (``arrivals``: step -> trace index joining then):
    with async a step's outputs arrive after the next step is scheduled. Each step's
    scheduled (request, tokens) pairs and block ids per running request."""
    records = []
    in_flight = None
    for step in range(num_steps):
        if step in arrivals:
            sched.admission.add_group(sched.state.workload.make_group(arrivals[step]))
        plan = sched.schedule(float(step))
        records.append({
            "scheduled": [] if plan is None else
            [(seq.request_id, n) for seq, n in zip(plan.seqs, plan.tokens)],
            "blocks": {seq.request_id: list(sched.manager.get_block_ids(seq.request_id)[0])
                       for seq in sched.state.running.values()}})
        if in_flight is not None:
            sched.apply(in_flight, step + 0.5, step - 1.0)
            in_flight = None
        if plan is not None:
            in_flight = plan
            if not overlap:
                sched.apply(plan, step + 0.5, float(step))
                in_flight = None
    return records


def test_rejected_drafts_are_never_cached() -> None:
    """All drafts rejected: after every step the cached blocks cover only computed tokens,
    and computed tokens equal the accepted ones (the rollback), never prompt + drafts."""
    sched = scheduler(make_trace([(0.0, 30, 12)]), **spec_options(k=4, rate=0.0))
    seen = []
    now = 0.0
    while sched.has_work():
        plan = sched.schedule(now)
        assert plan is not None
        sched.apply(plan, now + 0.01, now)
        now += 0.01
        for seq in sched.state.running.values():
            req = seq.req
            cached = sched.manager.single_type_manager.num_cached_block.get(req.request_id, 0)
            assert cached * 16 <= req.num_computed_tokens == seq.num_tokens - 1
            seen.append(req.num_computed_tokens)
    assert seen == list(range(30, 41))


def test_eagle_drops_the_last_hit_block() -> None:
    """A second request with the same 48-token prefix hits 3 blocks, EAGLE 2."""
    init_none_hash(sha256)
    hits = []
    for eagle in (False, True):
        manager = KVCacheManager(KVCacheConfig(20, 16), max_model_len=4096)
        manager.use_eagle = eagle
        hasher = get_request_block_hasher(16, sha256)
        first = Request("a", list(range(50)), 16, block_hasher=hasher)
        _, hit = manager.get_computed_blocks(first)
        assert manager.allocate_slots(first, 50 - hit, hit) is not None
        second = Request("b", list(range(50)) + [7], 16, block_hasher=hasher)
        hits.append(manager.get_computed_blocks(second)[1])
    assert hits == [48, 32]


@pytest.mark.parametrize("algo", ["fast", "sha256"])
def test_0_33_eagle_lookahead_hashes_keep_the_last_hit_block(algo: str) -> None:
    """Requests sharing a 40-token system prompt (2 blocks and 8 tokens more): under 0.33
    EAGLE's hashes cover the token after each block, so later requests hit 32 tokens; with
    ``hash_lookahead`` off (0.32's hashes) the last hit block is dropped: 16."""
    trace = add_system_prompt(make_trace([(0.1 * i, 30, 4) for i in range(3)]), 40)
    cached = {}
    for lookahead in (True, False):
        profile = profile_for("0.33").replace(hash_lookahead=lookahead)
        result = simulate(trace, block_hash=algo, vllm_profile=profile,
                          **spec_options("eagle", k=2, use_eagle=True))
        cached[lookahead] = [row["cached_tokens"] for row in rows(result)]
    assert cached == {True: [0, 32, 32], False: [0, 16, 16]}


def test_a_trace_acceptance_rate_replaces_the_runs_rate_for_its_request() -> None:
    """Run rate 0 (every draft rejected); request r0's own rate 1 accepts all of its drafts:
    r0's two verify steps add 4 outputs each, r1's five add one each."""
    reqs = [TraceRequest("r0", 0.0, 32, 9, acceptance_rate=1.0),
            TraceRequest("r1", 0.0, 32, 5)]
    result = simulate(Trace.from_requests(reqs), **spec_options(rate=0.0))
    assert result.counters["num_accepted_tokens"] == 2 * 3
    assert result.counters["num_draft_tokens"] == (2 + 4) * 3
    alone = simulate(make_trace([(0.0, 32, 9)]), **spec_options(rate=0.0))
    assert alone.counters["num_accepted_tokens"] == 0


SPEC_STREAM = {"num_gpu_blocks": 40, "max_num_seqs": 4, "max_num_batched_tokens": 128,
               "max_model_len": 160}
"""The configuration of the minimal diverging streams of ``vllm_diff.py --scheduler --spec 2``."""


def test_a_resumed_request_has_no_drafts_until_it_samples() -> None:
    """The mechanism of the minimal diverging stream against vLLM 0.14.0 and 0.19.0 (seed 3,
    r17, no prefix caching): a request preempted after decoding is recomputed in chunks, the
    last leaving one token. vLLM's drafter proposes nothing after a partial prefill (its token
    is discarded), so the next step schedules that one token alone (pagedsim gave it 1 + K)."""
    trace = make_trace([(0.0, 40, 40)])
    for version in ("0.14", "0.19", "0.33"):
        sched = scheduler(trace, caching=False, **spec_options(k=2),
                          max_num_batched_tokens=64, vllm_profile=profile_for(version))
        records = drive(sched, {}, 9)
        assert [n for r in records for _, n in r["scheduled"]] == [40] + [3] * 8
        seq = next(iter(sched.state.running.values()))
        assert seq.num_tokens == 65
        sched.preemption.preempt(seq, StepPlan(64))
        records = drive(sched, {}, 3)
        assert [r["scheduled"] for r in records] == [[("r0", 64)], [("r0", 1)], [("r0", 3)]]


def test_a_new_decode_is_padded_with_placeholder_drafts() -> None:
    """The minimal diverging stream against vLLM 0.33.0 (seed 0): r43 (49-token prompt)
    decodes when r45 (a 1-token prompt) arrives. From 0.27 vLLM pads r45 to 1 + K tokens with
    placeholder drafts, which are always rejected (even at acceptance 1): r45 gains one token
    (vLLM 0.19.0: [3, 1]; 0.27.0 and 0.33.0: [3, 3])."""
    trace = make_trace([(0.0, 49, 17), (0.0, 1, 5)])
    for version, padded in (("0.19", 1), ("0.27", 3), ("0.33", 3)):
        sched = scheduler(trace, **spec_options(k=2), **SPEC_STREAM,
                          vllm_profile=profile_for(version))
        sched.state.waiting.clear()
        records = drive(sched, {0: 0, 1: 1}, 2)
        assert records[1]["scheduled"] == [("r0", 3), ("r1", padded)], version
        late = sched.state.running[max(sched.state.running)]
        assert (late.num_out, late.req.num_computed_tokens) == (1, 1)


def test_a_full_prefix_hit_is_padded_from_0_33_only() -> None:
    """A 33-token prompt whose first 32 tokens hit the cache, with nothing running: vLLM
    0.33.0 pads it (it has computed tokens), 0.27.0 needs a running request to pad (both
    checked with the harness on a crafted stream: 0.27.0 scheduled 1 token, 0.33.0 3)."""
    trace = random_dataset(2, input_len=1, output_len=3, prefix_len=32)
    for version, tokens in (("0.27", 1), ("0.33", 3)):
        sched = scheduler(trace, **spec_options(k=2), **SPEC_STREAM,
                          vllm_profile=profile_for(version))
        sched.state.waiting.clear()
        records = drive(sched, {0: 0, 4: 1}, 5)
        assert records[0]["scheduled"] == [("0", 33)]
        assert records[4]["scheduled"] == [("1", tokens)], version
