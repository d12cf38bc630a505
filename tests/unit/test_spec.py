"""Speculative decoding in the scheduler (sim/sched/spec.py, sim/sched/async_sched.py): token
counts per step with K drafts, acceptance, lookahead slots, the rollback of rejected drafts
(prefix-cache coverage), EAGLE's dropped hit block, and the seeded acceptance draws."""
from __future__ import annotations

from typing import Any

import pytest

from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.kv_cache_manager import KVCacheManager
from allocator.kv_cache_spec import KVCacheConfig
from allocator.request import Request
from sim.cost.spec_cost import SpecConfig
from sim.engine import _make_manager
from sim.results.metrics import RunLog
from sim.sched.scheduler import Scheduler
from sim.workload.block_hash import make_hasher
from sim.workload.workload import Workload
from tests.unit.simkit import make_trace, run_config, simulate, steps
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


def scheduler(trace: Any, **options: Any) -> Scheduler:
    config = run_config(**options)
    manager = _make_manager("paged", config, True)
    if config.scheduler.use_eagle:
        manager.use_eagle = True  # type: ignore[attr-defined]
    workload = Workload(trace, config, make_hasher(16, "fast"))
    sched = Scheduler(manager, config, workload, RunLog(len(trace)))
    for index in range(len(trace)):
        sched.admission.add_group(workload.make_group(index))
    return sched


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
