"""The SimPy model of one serving engine: an arrival process and an engine process.

Arrivals replay the trace's times, putting each request in the scheduler's waiting queue and
waking the engine if it sleeps. The engine loops: schedule a step, ``yield`` its predicted
duration (step-time model plus any swap traffic over PCIe; a step without swaps adds none, so
``swap_time(0)`` must be 0), apply the results, record the
step with a memory snapshot. When nothing can run it sleeps until the next arrival. Both are
short generators, SimPy's idiom; all the logic lives in the scheduler.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import simpy

if TYPE_CHECKING:
    from sim.sched.admission import Admission
    from sim.results.metrics import RunLog
    from sim.sched.plan import StepPlan
    from sim.cost.step_base import StepModel, StepTime
    from sim.workload.workload import Workload

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


def record_step(log: RunLog, sched: Any, plan: StepPlan, st: StepTime, start: float,
                duration: float, swap_s: float, snap: tuple[int, ...]) -> None:
    """Append one row in ``metrics.STEP_COLUMNS`` order."""
    num_decode, _, prefills, total = plan.split()
    log.steps.append((
        sched.step_index - 1, start, duration, st.attention_s, st.linear_s, st.overhead_s,
        swap_s, len(sched.running), sched.num_running_groups, sched.num_waiting(),
        len(sched.swapped), num_decode + len(prefills), total - num_decode, num_decode,
        *snap, plan.prefix_queries, plan.prefix_hits, plan.num_preemptions, plan.num_copies,
        plan.swap_out_blocks, plan.swap_in_blocks,
    ))
