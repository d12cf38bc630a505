"""What the engine does with one planned step: its time, and runs of quiet steps in one go.

``predict`` prices a plan exactly as ``StepModel.predict`` would price its batch (from the
plan's running sums); ``drafting`` adds the speculative drafter's time. ``coast_steps`` and
``coast_steps_ahead`` are the engine's side of coasting (``sim/sched/coast.py``): one SimPy
timeout for the quiet steps the scheduler ran at once, synchronous or async.
"""
from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from sim.cost.spec_cost import DraftTime
from sim.cost.step_base import StepModel, StepTime
from sim.sched.coast import Coaster
from sim.sched.plan import StepPlan
from sim.sched.scheduler import Scheduler


def drafting(draft_time: DraftTime, plan: StepPlan) -> float:
    """The drafter's time in a step: it drafts for every sequence the step samples."""
    outcome = plan.outcome or {}
    num, context = 0, 0
    for seq, n, c in zip(plan.seqs, plan.tokens, plan.contexts):
        if outcome.get(seq, -1) >= 0:
            num += 1
            context += c + n
    return draft_time(num, context)


def _sleep_through(env: simpy.Environment, coaster: Coaster, now: float, end: float
                   ) -> Generator[simpy.Event, Any, None]:
    """One timeout to the end of the coasted steps, which must land on it exactly."""
    yield env.timeout(end - now)
    if env.now != end:
        raise AssertionError(f"coasted to {env.now!r}, not {end!r}")
    coaster.after_coast()


def coast_steps(env: simpy.Environment, coaster: Coaster, horizon: float,
                model: StepModel) -> Generator[simpy.Event, Any, None]:
    """The quiet steps before ``horizon`` (the next arrival), under one timeout."""
    now = env.now
    end = coaster.coast(now, horizon, model)
    if end is not None:
        yield from _sleep_through(env, coaster, now, end)


def coast_steps_ahead(env: simpy.Environment, sched: Scheduler, pending: StepPlan,
                      horizon: float, model: StepModel
                      ) -> Generator[simpy.Event, Any, StepPlan]:
    """Async: the quiet steps from the one in flight on, before ``horizon``, under one
    timeout; returns the plan then in flight."""
    coaster = sched.coaster
    assert coaster is not None
    now = env.now
    coasted = coaster.coast_ahead(now, horizon, lambda plan: predict(model, plan), pending,
                                  sched.schedule)
    if coasted is None:
        return pending
    end, pending = coasted
    yield from _sleep_through(env, coaster, now, end)
    return pending


def predict(model: StepModel, plan: StepPlan) -> StepTime:
    """Step time of a plan; the batch is summarised exactly as ``StepModel.predict`` does."""
    if model.decode_context_cap is not None:
        return model.predict(list(zip(plan.tokens, plan.contexts)))
    num_decode, context, prefills, _ = plan.split()
    return model.predict_split(num_decode, context, prefills)
