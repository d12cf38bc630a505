"""Run one allocator over one trace: build the manager and scheduler, run SimPy, check, summarise.

Every run ends with the manager's ``check_invariants()`` (after every step with ``debug``) and
a leak check: once every request has left, no block may still be held. The fast path
(``sim/cohort.py``) is used where its shortcuts are proven (the paged manager, full attention,
recompute preemption, no forks, no allocation log); elsewhere the reference loop runs.

The cyclic garbage collector is paused while SimPy runs: a run allocates millions of
short-lived objects, all freed by reference counting (no request or step leaves a reference
cycle behind; ``tests/unit/test_run_garbage.py`` checks), so the collector's passes over a
growing heap only cost time (about 4% of a long replay).
"""
from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from allocator.hashing import get_hash_fn_by_name, get_request_block_hasher
from allocator.interface import ManagerConfig
from allocator.paged import PagedKVCacheManager
from allocator.registry import make_manager
from sim.workload.block_hash import FastBlockHasher
from sim.sched.cohort import FastScheduler
from sim.engine import EngineState, arrivals, engine
from sim.results.metrics import RunLog, summarize
from sim.sched.scheduler import Scheduler
from sim.workload.sequence import Group
from sim.workload.workload import Workload

if TYPE_CHECKING:
    from sim.options import SchedulerConfig
    from sim.cost.step_base import StepModel
    from traces import Trace


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


def uses_caching(name: str, config: SchedulerConfig) -> bool:
    """Prefix caching is on for "paged" and plug-ins when enabled, never for the others."""
    return config.prefix_caching and name not in ("paged-nocache", "max", "pow2", "oracle", "ft")


def make_hasher(block_size: int, algo: str) -> Any:
    """``fast`` (sim/block_hash.py, the default) or a vLLM hash by name (sha256, ...)."""
    if algo == "fast":
        return FastBlockHasher(block_size)
    return get_request_block_hasher(block_size, get_hash_fn_by_name(algo))


def fast_path_ok(manager: Any, config: SchedulerConfig, workload: Workload,
                 sliding_window: int | None) -> bool:
    """Whether the shortcuts of sim/cohort.py are proven for this run."""
    if not config.fast or config.record_log or sliding_window is not None:
        return False
    if not isinstance(manager, PagedKVCacheManager) or config.preemption != "recompute":
        return False
    fanout = config.sampling_mode == "fanout"
    for n, width in zip(workload.n, workload.beam_width):
        if width > 1 or (n > 1 and not fanout):
            return False
    return True


def paged_fit(config: SchedulerConfig) -> Callable[[Group], bool]:
    """Up-front check for paged managers: a request's whole KV fits the empty pool."""
    bs, usable = config.block_size, config.num_gpu_blocks - 1

    def fits(group: Group) -> bool:
        own = -(-(group.prompt_len + group.output_len - 1) // bs)
        if group.width == 1 or (config.sampling_mode == "fanout" and group.beam_width == 1):
            return own <= usable
        shared = group.prompt_len // bs
        return shared + group.width * (own - shared) <= usable
    return fits


def run_allocator(name: str, trace: Trace, config: SchedulerConfig, model: StepModel,
                  swap_time: Callable[[int], float], *, placement: str = "buddy",
                  sliding_window: int | None = None, block_hash: str = "fast",
                  progress: Callable[[int], None] | None = None,
                  log_writer: Any = None) -> RunResult:
    """Simulate ``trace`` with the manager called ``name``; raise SimulationError on a leak."""
    wall = time.perf_counter()
    caching = uses_caching(name, config)
    mconfig = ManagerConfig(
        num_gpu_blocks=config.num_gpu_blocks, block_size=config.block_size,
        max_model_len=config.max_model_len, enable_caching=caching,
        sliding_window=sliding_window, num_cpu_blocks=config.num_cpu_blocks,
        placement=placement, log_stats=False)
    manager = make_manager(name, mconfig)
    workload = Workload(trace, config, make_hasher(config.block_size, block_hash) if caching
                        else None)
    fanout = config.sampling_mode == "fanout"
    if fast_path_ok(manager, config, workload, sliding_window):
        sched: Scheduler = FastScheduler(manager, config, workload, fanout=fanout)
    else:
        sched = Scheduler(manager, config, workload, fanout=fanout, request_batching=name == "ft",
                          independent=not isinstance(manager, PagedKVCacheManager))
    sched.eager_append = not isinstance(sched, FastScheduler)
    if isinstance(manager, PagedKVCacheManager) and sliding_window is None:
        sched.can_ever_fit = paged_fit(config)
    log = RunLog(len(trace))
    sched.on_finish = sched.on_reject = log.add_group
    if progress is not None:
        def leave(group: Group) -> None:
            log.add_group(group)
            progress(len(log.groups))
        sched.on_finish = sched.on_reject = leave
    state = EngineState()
    if config.debug:
        state.on_step.append(lambda plan, st, start: check_step(manager, sched))
    if log_writer is not None:
        state.on_plan.append(lambda plan, st, start: log_writer.plan(sched, plan, st, start))
        state.on_step.append(lambda plan, st, start: log_writer.step(sched, plan, st, start))
    env = simpy.Environment()
    env.process(arrivals(env, workload, sched, state))
    env.process(engine(env, sched, model, swap_time, log, sched.snapshot, state, len(trace)))
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
    leaked = -(-held // sched.config.block_size)
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
