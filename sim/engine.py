"""The SimPy model of one serving engine, and one allocator's replay of a trace through it.

Arrivals replay the trace's times, putting each request in the scheduler's waiting queue and
waking the engine if it sleeps (through the client's slots under ``--max-concurrency``,
``sim/client.py``). The engine loops: schedule a step, ``yield`` its predicted
duration (step-time model plus any swap traffic over PCIe; a step without swaps adds none, so
``swap_time(0)`` must be 0), then the scheduler applies and records it. When nothing can run
it sleeps until the next arrival. Both are short generators, SimPy's idiom; all the logic
lives in the scheduler. ``replay`` builds the manager, workload and scheduler for one
allocator, runs SimPy and checks the end state: ``check_invariants()`` (after every step with
``debug``) and no leaked block once every request has left.

The cyclic garbage collector is paused while SimPy runs: a run allocates millions of
short-lived objects, all freed by reference counting (no request or step leaves a reference
cycle behind; ``tests/unit/test_run_garbage.py`` checks), so the collector's passes over a
growing heap only cost time (about 4% of a long replay).
"""
from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import simpy

from allocator.interface import KVManager, ManagerConfig
from allocator.paged import PagedKVCacheManager
from allocator.registry import make_manager
from sim.client import Client, limited_arrivals
from sim.config import RunConfig
from sim.cost.api_path import api_path_of, entry_times
from sim.cost.spec_cost import DraftTime, make_draft_time
from sim.cost.step_base import StepModel, StepTime
from sim.cost.step_extras import extras_of
from sim.cost.step_model import make_step_model
from sim.cost.swap_cost import make_swap_cost
from sim.release import max_in_flight_tokens
from sim.results.metrics import RunLog, summarize
from sim.sched.admission import fits_empty_pool
from sim.sched.fast_path import uses_fast_path
from sim.sched.plan import StepPlan
from sim.sched.scheduler import Scheduler, SimulationError
from sim.sched.spec_rules import set_eagle
from sim.stepping import coast_steps, coast_steps_ahead, drafting, predict
from sim.workload.block_hash import make_hasher
from sim.workload.sequence import Group
from sim.workload.workload import Workload
from traces import Trace

Hook = Callable[[StepPlan, StepTime, float], None]
"""Called with a step's plan, step time and start: before it runs, or after it is applied."""
CONTIGUOUS = ("paged-nocache", "max", "pow2", "oracle", "ft")
"""Built-in allocators without prefix caching."""


class Costs(NamedTuple):
    """What a step costs: the step-time model, the PCIe swap time of k blocks and the
    speculative drafter's time (``sim/cost/spec_cost.py``; None without drafts)."""

    step_model: StepModel
    swap_time: Callable[[int], float]
    draft_time: DraftTime | None = None


def build_costs(config: RunConfig) -> Costs:
    """The cost models of a configuration (built in every process that replays it)."""
    model, gpu, tp = config.model, config.gpu.spec, config.gpu.tp
    dtype = config.cache.kv_cache_dtype
    step_model = make_step_model(config.cost.step_model, model, gpu, tp, kv_cache_dtype=dtype,
                                 extras=extras_of(config))
    swap = make_swap_cost(model, gpu, config.cache.block_size, tp=tp, kv_cache_dtype=dtype)
    spec = config.scheduler.spec
    draft = make_draft_time(spec, model, gpu, tp, dtype) if spec is not None else None
    return Costs(step_model, swap.time_s, draft)


@dataclass(slots=True)
class EngineState:
    """What the two processes share: the wake-up event, the arrivals so far and step hooks
    (``on_plan`` before a step runs, ``on_step`` after it is applied)."""

    wake: simpy.Event | None = None
    num_arrived: int = 0
    next_arrival: float = -math.inf
    """The exact time of the next arrival event (inf after the last; -inf before the arrival
    process has started)."""
    on_plan: list[Hook] = field(default_factory=list)
    on_step: list[Hook] = field(default_factory=list)
    coast: bool = True
    """Whether quiet steps may run ahead in one go (off under a client concurrency limit)."""


def arrivals(env: simpy.Environment, workload: Workload, sched: Scheduler,
             state: EngineState, entries: list[float]) -> Generator[simpy.Event, Any, None]:
    """Replay arrival times; each request joins the waiting queue at its entry time (its
    arrival, or after the API path: ``sim/cost/api_path.py``)."""
    add = sched.admission.add_group
    for index, when in enumerate(entries):
        now = env.now
        if when > now:
            delay = when - now
            state.next_arrival = now + delay  # the time SimPy gives the timeout
            yield env.timeout(delay)
        add(workload.make_group(index))
        state.num_arrived = index + 1
        if state.wake is not None and not state.wake.triggered:
            state.wake.succeed()
    state.next_arrival = math.inf


def engine(env: simpy.Environment, sched: Scheduler, costs: Costs, state: EngineState,
           total: int) -> Generator[simpy.Event, Any, None]:
    """Schedule, run and apply steps until every request has left.

    With the fast path the quiet steps before the next arrival run in one go, under one
    timeout, when no hook watches individual steps.
    """
    model, swap_time, draft_time = costs
    stalled: tuple[int, ...] | None = None
    coast = state.coast and not (state.on_plan or state.on_step
                                 or model.decode_context_cap is not None)
    overlap = sched.extras is not None and sched.extras.overlap
    pending: StepPlan | None = None
    while True:
        plan = pending if pending is not None else sched.schedule(env.now)
        pending = None
        if plan is None:
            marker = sched.marker()
            if marker != stalled and sched.has_work():
                stalled = marker
                continue
            if state.num_arrived == total:
                sched.give_up()
                return
            state.wake = env.event()
            yield state.wake
            state.wake = None
            continue
        stalled = None
        st = predict(model, plan)
        if draft_time is not None:
            st = st._replace(overhead_s=st.overhead_s + drafting(draft_time, plan))
        swap_s = (swap_time(plan.swap_out_blocks) + swap_time(plan.swap_in_blocks)
                  if plan.swap_out_blocks or plan.swap_in_blocks else 0.0)
        duration = st.attention_s + st.linear_s + st.overhead_s + swap_s
        start = env.now
        for hook in state.on_plan:
            hook(plan, st, start)
        if overlap:  # async: the next step is scheduled while this one runs
            pending = sched.schedule(start)
            if pending is not None:
                pending.overlapped = True
        yield env.timeout(duration)
        sched.complete(plan, st, start, duration, swap_s)
        for hook in state.on_step:
            hook(plan, st, start)
        if coast and sched.coaster is not None:
            if not overlap:
                yield from coast_steps(env, sched.coaster, state.next_arrival, model)
            elif pending is not None:
                pending = yield from coast_steps_ahead(env, sched, pending,
                                                       state.next_arrival, model)


@dataclass(slots=True)
class RunResult:
    """One allocator's records and summary."""

    name: str
    log: RunLog
    summary: dict[str, Any]
    counters: dict[str, Any]
    fast: bool


def replay(name: str, config: RunConfig, trace: Trace, costs: Costs, *,
           progress: Callable[[int], None] | None = None, log_writer: Any = None) -> RunResult:
    """Simulate ``trace`` with the manager called ``name``; raise SimulationError on a leak.

    Args:
        progress: called with the number of requests that have left, as each one leaves.
        log_writer: records the allocation log (``sim/results/alloc_log.py``'s StepWriter).
    """
    wall = time.perf_counter()
    caching = config.cache.prefix_caching and name not in CONTIGUOUS
    manager = _make_manager(name, config, caching)
    lookahead = set_eagle(manager, config.scheduler, caching)
    cache = config.cache
    profile = config.scheduler.vllm_profile
    workload = Workload(trace, config, make_hasher(cache.block_size, cache.block_hash, profile,
                                                   lookahead) if caching else None)
    path = api_path_of(config.cost)
    log = RunLog(len(trace), path.output_s)
    paged = isinstance(manager, PagedKVCacheManager)
    sched = Scheduler(manager, config, workload, log,
                      fast=uses_fast_path(manager, config, workload), independent=not paged,
                      request_batching=name == "ft",
                      can_ever_fit=fits_empty_pool(config)
                      if paged and config.model.sliding_window is None else None)
    if progress is not None:
        def leave(group: Group) -> None:
            log.add_group(group)
            progress(len(log.groups))
        sched.state.on_finish = sched.state.on_reject = leave
    state = _engine_state(sched, config.scheduler.debug, log_writer)
    env = simpy.Environment()
    limit = config.workload.max_concurrency
    if limit is None:
        entries = (entry_times(workload.arrivals, workload.prompt_lens, path) if path.on
                   else workload.arrivals)
        env.process(arrivals(env, workload, sched, state, entries))
    else:
        client = Client(env, limit, path)
        sched.state.on_finish = client.chain(sched.state.on_finish)
        sched.state.on_reject = client.chain(sched.state.on_reject)
        state.coast = False
        env.process(limited_arrivals(env, workload, sched, state, client))
    env.process(engine(env, sched, costs, state, len(trace)))
    collecting = gc.isenabled()
    gc.disable()  # see the module docstring
    try:
        env.run()
    finally:
        if collecting:
            gc.enable()
    return _finish(name, sched, caching, cache.block_size, time.perf_counter() - wall)


def _engine_state(sched: Scheduler, debug: bool, log_writer: Any) -> EngineState:
    """The engine's shared state with the hooks that watch single steps."""
    state = EngineState()
    if debug:
        state.on_step.append(lambda plan, st, start: sched.check())
    if log_writer is not None:
        state.on_plan.append(lambda plan, st, start: log_writer.plan(sched, plan, st, start))
        state.on_step.append(lambda plan, st, start: log_writer.step(sched, plan, st, start))
    return state


def _make_manager(name: str, config: RunConfig, caching: bool) -> KVManager:
    cache, sched = config.cache, config.scheduler
    return make_manager(name, ManagerConfig(
        num_gpu_blocks=cache.num_gpu_blocks, block_size=cache.block_size,
        max_model_len=sched.max_model_len, enable_caching=caching,
        sliding_window=config.model.sliding_window, num_cpu_blocks=cache.num_cpu_blocks,
        placement=cache.placement, log_stats=False, vllm_profile=sched.vllm_profile,
        watermark=sched.vllm_profile.watermark or 0.0,
        max_in_flight_tokens=max_in_flight_tokens(sched.vllm_profile,
                                                  sched.max_num_batched_tokens)))


def _finish(name: str, sched: Scheduler, caching: bool, block_size: int,
            wall_s: float) -> RunResult:
    """End-of-run checks, the summary and the counters."""
    manager, log, state = sched.manager, sched.log, sched.state
    manager.check_invariants()
    snap = manager.memory_snapshot()
    held = snap.capacity - snap.cached_evictable - snap.external_frag - snap.free
    leaked = -(-held // block_size)
    left = len(state.running) + len(state.waiting) + len(state.swapped)
    if leaked or left or len(log.groups) != log.num_requests:
        raise SimulationError(f"{name}: run ended with {leaked} leaked blocks, {left} requests "
                              f"still queued, {len(log.groups)}/{log.num_requests} accounted")
    summary = summarize(log, snap.capacity, caching=caching, leaked_blocks=leaked,
                        num_cow_copies=state.num_cow_copies, wall_s=wall_s)
    coaster = sched.coaster
    counters = {
        "num_truncated": sum(1 for g in log.groups if g.truncated),
        "num_rejected_prompt_too_long": sum(1 for g in log.groups
                                            if g.reject_reason == "prompt_too_long"),
        "num_rejected_exceeds_pool": sum(1 for g in log.groups
                                         if g.reject_reason == "exceeds_pool"),
        "num_steps": len(log.steps),
        "num_swap_fallbacks": state.num_swap_fallbacks,
        "num_fork_copied_slots": getattr(manager, "num_fork_copied_slots", 0),
        "fast_path": sched.steady is not None,
        "num_coasted_steps": coaster.num_coasted if coaster is not None else 0,
        "num_coasted_finishing_steps": coaster.num_coasted_finishing if coaster else 0,
    }
    if sched.extras is not None:
        counters.update(sched.extras.summary(len(log.steps)))
    return RunResult(name, log, summary, counters, sched.steady is not None)
