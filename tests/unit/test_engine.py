"""The SimPy processes: arrivals replay trace times, the engine sleeps and wakes, steps
tile the clock, and a steady run obeys Little's law."""
from __future__ import annotations

import math

import pytest

from sim.cost.gpus import get_gpu
from sim.cost.models import get_model
from sim.cost.step_model import make_step_model
from sim.engine import predict
from sim.sched.plan import StepPlan
from tests.unit.simkit import STEP_S, make_trace, rows, simulate, steps
from traces.synthetic import sharegpt_like


def test_arrivals_replay_trace_times_and_engine_wakes_after_idle() -> None:
    """A request arriving long after the system went idle starts exactly at its arrival."""
    result = simulate(make_trace([(0.0, 10, 2), (5.0, 10, 2)]))
    first, second = rows(result)
    assert first["finish_s"] == pytest.approx(2 * STEP_S)
    assert second["arrival_s"] == 5.0
    assert second["first_scheduled_s"] == pytest.approx(5.0)
    assert second["finish_s"] == pytest.approx(5.0 + 2 * STEP_S)


def test_steps_tile_the_clock() -> None:
    """Each step starts when the previous one ends (or at an arrival); durations add up."""
    result = simulate(make_trace([(0.0, 30, 8), (0.013, 50, 4), (0.5, 20, 3)]))
    cols = steps(result)
    for i in range(1, len(cols["step"])):
        assert cols["time_s"][i] >= cols["time_s"][i - 1] + cols["duration_s"][i - 1] - 1e-12
    for i, total in enumerate(cols["duration_s"]):
        parts = (cols["attention_s"][i] + cols["linear_s"][i] + cols["overhead_s"][i]
                 + cols["swap_s"][i])
        assert total == pytest.approx(parts)
    assert cols["step"] == list(range(len(cols["step"])))


def test_arrival_during_a_step_waits_for_the_next() -> None:
    """A request arriving mid-step is scheduled at the end of that step."""
    result = simulate(make_trace([(0.0, 10, 3), (0.004, 10, 3)]))
    assert rows(result)[1]["first_scheduled_s"] == pytest.approx(STEP_S)


def test_predict_matches_the_step_model_on_the_listed_batch() -> None:
    """The engine's running-sum prediction equals StepModel.predict on the batch."""
    model = make_step_model("roofline", get_model("llama-2-7b"), get_gpu("a100-80gb"))
    plan = StepPlan(8192, tokens=[1, 300, 1], contexts=[500, 0, 70], num_steady=3,
                    steady_context=3000)
    batch = [(1, 500), (300, 0), (1, 70), (1, 1000), (1, 1000), (1, 1000)]
    assert predict(model, plan) == model.predict(batch)


def test_littles_law_on_a_steady_run() -> None:
    """Time-averaged requests in the system (from the steps) = arrival rate x mean latency."""
    trace = sharegpt_like(200, 4.0, seed=2)
    model = make_step_model("roofline", get_model("llama-2-7b"), get_gpu("a100-80gb"))
    result = simulate(trace, model=model, num_gpu_blocks=2000)
    cols, reqs = steps(result), rows(result)
    start = min(r["arrival_s"] for r in reqs)
    span = max(r["finish_s"] for r in reqs) - start
    occupancy = math.fsum(d * (r + w) for d, r, w in zip(
        cols["duration_s"], cols["num_running_reqs"], cols["num_waiting"])) / span
    rate = len(reqs) / span
    latency = math.fsum(r["finish_s"] - r["arrival_s"] for r in reqs) / len(reqs)
    assert occupancy == pytest.approx(rate * latency, rel=0.03)
    assert result.summary["mean_batch_size"] > 2
