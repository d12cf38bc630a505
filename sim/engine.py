"""The SimPy model of one serving engine, and one allocator's replay of a trace through it.

Arrivals replay the trace's times, putting each request in the scheduler's waiting queue and
waking the engine if it sleeps. The engine loops: schedule a step, ``yield`` its predicted
duration (step-time model plus any swap traffic over PCIe; a step without swaps adds none, so
``swap_time(0)`` must be 0), apply the results, record the step with a memory snapshot. When
nothing can run it sleeps until the next arrival. Both are short generators, SimPy's idiom;
all the logic lives in the scheduler. ``replay`` builds the manager, workload and scheduler
for one allocator, runs SimPy and checks the end state: ``check_invariants()`` (after every
step with ``debug``) and no leaked block once every request has left.

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

from allocator.hashing import get_hash_fn_by_name, get_request_block_hasher
from allocator.interface import ManagerConfig
from allocator.paged import PagedKVCacheManager
from allocator.registry import make_manager
from sim.config import RunConfig
from sim.cost.step_base import StepModel, StepTime
from sim.cost.step_model import make_step_model
from sim.cost.swap_cost import make_swap_cost
from sim.results.metrics import RunLog, summarize
from sim.sched.admission import Admission
from sim.sched.cohort import FastScheduler
from sim.sched.plan import StepPlan
from sim.sched.scheduler import Scheduler, record_step
from sim.workload.block_hash import FastBlockHasher
from sim.workload.sequence import Group
from sim.workload.workload import Workload
from traces import Trace

Snapshot = Callable[[], tuple[int, ...]]


@dataclass(slots=True)
class EngineState:
    """What the two processes share: the wake-up event, the arrivals so far and step hooks
    (``on_plan`` before a step runs, ``on_step`` after it is applied)."""

    wake: simpy.Event | None = None
    num_arrived: int = 0
    next_arrival: float = -math.inf
    """The exact time of the next arrival event (inf after the last; -inf before the arrival
    process has started)."""
    on_plan: list[Callable[[StepPlan, StepTime, float], None]] = field(default_factory=list)
    on_step: list[Callable[[StepPlan, StepTime, float], None]] = field(default_factory=list)


def arrivals(env: simpy.Environment, workload: Workload, sched: Admission,
             state: EngineState) -> Generator[simpy.Event, Any, None]:
    """Replay arrival times; each request joins the waiting queue at its time."""
    times = workload.arrivals
    for index, when in enumerate(times):
        now = env.now
        if when > now:
            delay = when - now
            state.next_arrival = now + delay  # the time SimPy gives the timeout
            yield env.timeout(delay)
        sched.add_group(workload.make_group(index))
        state.num_arrived = index + 1
        if state.wake is not None and not state.wake.triggered:
            state.wake.succeed()
    state.next_arrival = math.inf


def engine(env: simpy.Environment, sched: Any, model: StepModel, swap_time: Callable[[int], float],
           log: RunLog, snapshot: Snapshot, state: EngineState,
           total: int) -> Generator[simpy.Event, Any, None]:
    """Schedule, run and apply steps until every request has left.

    A scheduler with ``coast`` (the fast path) runs its quiet steps before the next arrival
    in one go, under one timeout, when no hook watches individual steps.
    """
    stalled: tuple[int, ...] | None = None
    coast = getattr(sched, "coast", None)
    if state.on_plan or state.on_step or model.decode_context_cap is not None:
        coast = None
    while True:
        plan = sched.schedule(env.now)
        if plan is None:
            marker = (sched.epoch, len(sched.waiting), len(sched.swapped), len(sched.running),
                      len(log.groups))
            if marker != stalled and (sched.waiting or sched.swapped or sched.running):
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
        swap_s = (swap_time(plan.swap_out_blocks) + swap_time(plan.swap_in_blocks)
                  if plan.swap_out_blocks or plan.swap_in_blocks else 0.0)
        duration = st.attention_s + st.linear_s + st.overhead_s + swap_s
        start = env.now
        for hook in state.on_plan:
            hook(plan, st, start)
        yield env.timeout(duration)
        sched.apply(plan, env.now, start)
        record_step(log, sched, plan, st, start, duration, swap_s, snapshot())
        for hook in state.on_step:
            hook(plan, st, start)
        if coast is not None:
            now = env.now
            end = coast(now, state.next_arrival, model, log)
            if end is not None:
                yield env.timeout(end - now)
                if env.now != end:
                    raise AssertionError(f"coasted to {env.now!r}, not {end!r}")
                sched.after_coast(log)


def predict(model: StepModel, plan: StepPlan) -> StepTime:
    """Step time of a plan; the batch is summarised exactly as ``StepModel.predict`` does."""
    if model.decode_context_cap is not None:
        return model.predict(list(zip(plan.tokens, plan.contexts)))
    num_decode, context, prefills, _ = plan.split()
    return model.predict_split(num_decode, context, prefills)


class Costs(NamedTuple):
    """What a step costs: the step-time model and the PCIe swap time of k blocks."""

    step_model: StepModel
    swap_time: Callable[[int], float]


def build_costs(config: RunConfig) -> Costs:
    """The cost models of a configuration (built in every process that replays it)."""
    model, gpu, tp = config.model, config.gpu.spec, config.gpu.tp
    dtype = config.cache.kv_cache_dtype
    step_model = make_step_model(config.cost.step_model, model, gpu, tp, kv_cache_dtype=dtype)
    swap = make_swap_cost(model, gpu, config.cache.block_size, tp=tp, kv_cache_dtype=dtype)
    return Costs(step_model, swap.time_s)


class SimulationError(RuntimeError):
    """A run broke an invariant (a leak, a failed check): a bug, not bad input."""


@dataclass(slots=True)
class RunResult:
    """One allocator's records and summary."""

    name: str
    log: RunLog
    summary: dict[str, Any]
    counters: dict[str, Any]
    fast: bool


def uses_caching(name: str, config: RunConfig) -> bool:
    """Prefix caching is on for "paged" and plug-ins when enabled, never for the others."""
    return config.cache.prefix_caching and name not in ("paged-nocache", "max", "pow2",
                                                         "oracle", "ft")


def make_hasher(block_size: int, algo: str) -> Any:
    """``fast`` (sim/workload/block_hash.py, the default) or a vLLM hash by name (sha256, ...)."""
    if algo == "fast":
        return FastBlockHasher(block_size)
    return get_request_block_hasher(block_size, get_hash_fn_by_name(algo))


def fast_path_ok(manager: Any, config: RunConfig, workload: Workload) -> bool:
    """Whether the shortcuts of the fast path are proven for this run."""
    sched = config.scheduler
    if not sched.fast or config.output.record_log or config.model.sliding_window is not None:
        return False
    if not isinstance(manager, PagedKVCacheManager) or sched.preemption != "recompute":
        return False
    fanout = sched.sampling_mode == "fanout"
    for n, width in zip(workload.n, workload.beam_width):
        if width > 1 or (n > 1 and not fanout):
            return False
    return True


def paged_fit(config: RunConfig) -> Callable[[Group], bool]:
    """Up-front check for paged managers: a request's whole KV fits the empty pool."""
    bs, usable = config.cache.block_size, config.cache.num_gpu_blocks - 1
    fanout = config.scheduler.sampling_mode == "fanout"

    def fits(group: Group) -> bool:
        own = -(-(group.prompt_len + group.output_len - 1) // bs)
        if group.width == 1 or (fanout and group.beam_width == 1):
            return own <= usable
        shared = group.prompt_len // bs
        return shared + group.width * (own - shared) <= usable
    return fits


def replay(name: str, config: RunConfig, trace: Trace, costs: Costs, *,
           progress: Callable[[int], None] | None = None, log_writer: Any = None) -> RunResult:
    """Simulate ``trace`` with the manager called ``name``; raise SimulationError on a leak."""
    wall = time.perf_counter()
    caching = uses_caching(name, config)
    cache = config.cache
    mconfig = ManagerConfig(
        num_gpu_blocks=cache.num_gpu_blocks, block_size=cache.block_size,
        max_model_len=config.scheduler.max_model_len, enable_caching=caching,
        sliding_window=config.model.sliding_window, num_cpu_blocks=cache.num_cpu_blocks,
        placement=cache.placement, log_stats=False)
    manager = make_manager(name, mconfig)
    workload = Workload(trace, config, make_hasher(cache.block_size, cache.block_hash)
                        if caching else None)
    fanout = config.scheduler.sampling_mode == "fanout"
    if fast_path_ok(manager, config, workload):
        sched: Scheduler = FastScheduler(manager, config, workload, fanout=fanout)
    else:
        sched = Scheduler(manager, config, workload, fanout=fanout, request_batching=name == "ft",
                          independent=not isinstance(manager, PagedKVCacheManager))
    sched.eager_append = not isinstance(sched, FastScheduler)
    if isinstance(manager, PagedKVCacheManager) and config.model.sliding_window is None:
        sched.can_ever_fit = paged_fit(config)
    log = RunLog(len(trace))
    sched.on_finish = sched.on_reject = log.add_group
    if progress is not None:
        def leave(group: Group) -> None:
            log.add_group(group)
            progress(len(log.groups))
        sched.on_finish = sched.on_reject = leave
    state = EngineState()
    if config.scheduler.debug:
        state.on_step.append(lambda plan, st, start: check_step(manager, sched))
    if log_writer is not None:
        state.on_plan.append(lambda plan, st, start: log_writer.plan(sched, plan, st, start))
        state.on_step.append(lambda plan, st, start: log_writer.step(sched, plan, st, start))
    env = simpy.Environment()
    env.process(arrivals(env, workload, sched, state))
    env.process(engine(env, sched, costs.step_model, costs.swap_time, log, sched.snapshot,
                       state, len(trace)))
    collecting = gc.isenabled()
    gc.disable()  # see the module docstring
    try:
        env.run()
    finally:
        workload.close()
        if collecting:
            gc.enable()
    return finish_run(name, manager, sched, log, caching, time.perf_counter() - wall)


def check_step(manager: Any, sched: Scheduler) -> None:
    """--debug: invariants after every step; the fast snapshot must equal the real one."""
    if isinstance(sched, FastScheduler):
        sched.materialize()
        snap = manager.memory_snapshot()
        real = (snap.token_states, snap.reserved, snap.internal_frag, snap.cached_evictable,
                snap.external_frag, snap.free, snap.logical_slots)
        if real != sched.snapshot():
            raise SimulationError(f"step {sched.step_index - 1}: fast snapshot "
                                  f"{sched.snapshot()} != memory_snapshot() {real}")
    manager.check_invariants()


def finish_run(name: str, manager: Any, sched: Scheduler, log: RunLog, caching: bool,
               wall_s: float) -> RunResult:
    """End-of-run checks and the summary."""
    manager.check_invariants()
    snap = manager.memory_snapshot()
    held = snap.capacity - snap.cached_evictable - snap.external_frag - snap.free
    leaked = -(-held // sched.run.cache.block_size)
    left = len(sched.running) + len(sched.waiting) + len(sched.swapped)
    if leaked or left or len(log.groups) != log.num_requests:
        raise SimulationError(f"{name}: run ended with {leaked} leaked blocks, {left} requests "
                              f"still queued, {len(log.groups)}/{log.num_requests} accounted")
    summary = summarize(log, snap.capacity, caching=caching, leaked_blocks=leaked,
                        num_cow_copies=sched.num_cow_copies, wall_s=wall_s)
    counters = {
        "num_truncated": sum(1 for g in log.groups if g.truncated),
        "num_rejected_prompt_too_long": sum(1 for g in log.groups
                                            if g.reject_reason == "prompt_too_long"),
        "num_rejected_exceeds_pool": sum(1 for g in log.groups
                                         if g.reject_reason == "exceeds_pool"),
        "num_steps": len(log.steps),
        "num_swap_fallbacks": sched.num_swap_fallbacks,
        "num_fork_copied_slots": getattr(manager, "num_fork_copied_slots", 0),
        "fast_path": isinstance(sched, FastScheduler),
        "num_coasted_steps": getattr(sched, "num_coasted", 0),
        "num_coasted_finishing_steps": getattr(sched, "num_coasted_finishing", 0),
    }
    return RunResult(name, log, summary, counters, isinstance(sched, FastScheduler))
