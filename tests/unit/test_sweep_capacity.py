"""Capacity search: bracketing and bisection on rate_scale (sim/sweep/capacity.py)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from sim.sweep.backends import LocalBackend
from sim.sweep.capacity import (
    Bracket,
    allocator_names,
    find_capacity,
    plan_searches,
    ratios,
    render,
)
from sim.sweep.cell import TraceCache, run_cell
from sim.sweep.run import main, run_capacity
from sim.sweep.spec import CapacitySettings, load_spec

LOG_ENV = "PAGEDSIM_TEST_CAPACITY_LOG"
SLOPES = {"paged": 0.02, "max": 0.08}


def fake_runner(options: dict[str, Any], out_dir: Path, cache: TraceCache) -> dict[str, Any]:
    """Latency = rate_scale x a per-allocator slope, so capacity = SLO / slope."""
    with open(os.environ[LOG_ENV], "a") as fh:
        fh.write(f"{options['allocators']} {options['rate_scale']}\n")
    name = options["allocators"]
    return {"allocators": {name: {"norm_latency_mean_s": options["rate_scale"] * SLOPES[name]}}}


def assert_brackets(bracket: Bracket, capacity: float, tolerance: float) -> None:
    assert bracket.status == "ok"
    assert bracket.lower is not None and bracket.upper is not None
    assert bracket.lower <= capacity < bracket.upper
    assert bracket.upper - bracket.lower <= tolerance * bracket.lower


@pytest.mark.parametrize("slope", [0.001, 0.07, 0.3, 5.0])
def test_linear_latency_capacity_within_tolerance(slope: float) -> None:
    """latency = slope x rate meets SLO 0.2 up to 0.2 / slope; the search brackets it to 2 %."""
    settings = CapacitySettings()
    bracket = find_capacity(lambda rate: slope * rate, settings)
    assert_brackets(bracket, 0.2 / slope, settings.tolerance)
    doublings = abs(math.log2(0.2 / slope)) + 2
    assert len(bracket.probes) <= doublings + math.log2(1 / settings.tolerance) + 2


def test_queueing_latency_capacity() -> None:
    """M/M/1-like latency 0.01 / (1 - rate/10) meets 0.2 up to rate 9.5 (1 - r/10 = 1/20)."""
    settings = CapacitySettings(tolerance=0.001)
    bracket = find_capacity(lambda r: 0.01 / (1 - r / 10) if r < 10 else math.inf, settings)
    assert_brackets(bracket, 9.5, 0.001)


def test_limits_and_missing_values() -> None:
    """Never missing stops at max_rate_scale, always missing at min; None counts as a miss."""
    settings = CapacitySettings(min_rate_scale=0.25, max_rate_scale=6)
    above = find_capacity(lambda r: 0.0, settings)
    assert (above.status, above.lower, above.upper) == ("above_max", 6, None)
    assert [r for r, _ in above.probes] == [1, 2, 4, 6]
    below = find_capacity(lambda r: None, settings)
    assert (below.status, below.lower, below.upper) == ("below_min", None, 0.25)
    assert [r for r, _ in below.probes] == [1, 0.5, 0.25]
    assert not Bracket(settings).meets(float("nan"))


def test_plan_searches_one_per_allocator_and_point(tmp_path: Path) -> None:
    """Searches cover the other axes x allocators; rate_scale axes are left to the search."""
    spec_path = tmp_path / "s.toml"
    spec_path.write_text('[options]\nallocators = "paged, max"\nlimit = 5\n'
                         "[axes]\nrate_scale = [1, 2]\nblock_size = [8, 16]\n")
    spec = load_spec(spec_path)
    searches = plan_searches(spec, CapacitySettings(), "ignored")
    assert [(s.params, s.allocator) for s in searches] == [
        ({"block_size": 8}, "paged"), ({"block_size": 8}, "max"),
        ({"block_size": 16}, "paged"), ({"block_size": 16}, "max")]
    assert searches[1].options == {"allocators": "max", "limit": 5, "block_size": 8}
    assert searches[1].probe(2.5)[0] == "block_size=8__allocator=max__rate_scale=2.5"
    spec_path.write_text('[axes]\nallocators = [["paged", "max"], "oracle,paged"]\n')
    assert allocator_names(load_spec(spec_path), "x") == ["paged", "max", "oracle"]
    spec_path.write_text("")
    assert allocator_names(load_spec(spec_path), "paged,ft") == ["paged", "ft"]


def test_ratio_and_table() -> None:
    """The headline ratio is paged's capacity over max's; the table names both."""
    rows = [{"allocator": "paged", "status": "ok", "capacity_rate_scale": 3.0,
             "capacity_req_s": 6.0, "num_probes": 9, "error": None},
            {"allocator": "max", "status": "ok", "capacity_rate_scale": 1.5,
             "capacity_req_s": 3.0, "num_probes": 8, "error": None}]
    ratio = ratios(rows, [])
    assert ratio == [{"ratio": 2.0, "exact": True}]
    text = render(rows, ratio, [], CapacitySettings())
    assert "paged / max capacity: 2.00" in text and "max        1.5" in text


def test_parallel_search_finds_known_capacities_and_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the pool, paged (slope 0.02) reaches 10 and max (0.08) 2.5: ratio 4; a re-run
    reuses every probe."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv(LOG_ENV, str(log))
    spec_path = tmp_path / "s.toml"
    spec_path.write_text('[options]\nallocators = "paged,max"\n')
    spec = load_spec(spec_path)
    settings = CapacitySettings(tolerance=0.01)
    with LocalBackend(2) as backend:
        result = run_capacity(spec, settings, tmp_path / "out", backend, runner=fake_runner,
                              progress=False)
        probes = len(log.read_text().splitlines())
        again = run_capacity(spec, settings, tmp_path / "out", backend, runner=fake_runner,
                             progress=False)
    by_name = {r["allocator"]: r for r in result["searches"]}
    for name, capacity in (("paged", 10.0), ("max", 2.5)):
        row = by_name[name]
        assert row["capacity_rate_scale"] <= capacity < row["upper_rate_scale"]
        assert row["upper_rate_scale"] - row["capacity_rate_scale"] <= 0.01 * capacity
    assert result["ratios"][0]["ratio"] == pytest.approx(4.0, rel=0.02)
    assert probes == sum(r["num_probes"] for r in result["searches"])
    assert len(log.read_text().splitlines()) == probes
    assert again["searches"] == result["searches"]
    saved = json.loads((tmp_path / "out" / "capacity.json").read_text())
    assert saved["searches"] == result["searches"]


def test_real_capacity_matches_hand_calculation(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Two identical requests g = 1 s apart, one running at a time, each S seconds alone:
    the second waits S - g/r, so mean normalised latency = (3S - g/r) / (2 x output).
    With SLO 1.25 S / output the capacity is g/r = S/2, i.e. r* = 2g/S. (The engine alone:
    the API path's time outside it would not make the second wait. The plain roofline step
    model: the calculation holds for any S, and this model is not fitted at each probe's
    start as the default calibrated one is.)"""
    trace = tmp_path / "two.csv"
    trace.write_text("Timestamp,Request tokens,Response tokens\n0,100,30\n1.0,100,30\n")
    fixed = {"trace": str(trace), "allocators": "paged,max", "max_num_seqs": 1,
             "api_overhead": False, "step_model": "roofline"}
    alone = run_cell({**fixed, "rate_scale": 0.01}, tmp_path / "alone", TraceCache())
    service = alone["allocators"]["paged"]["e2el_mean_s"]
    spec = tmp_path / "cap.toml"
    spec.write_text(f'[options]\ntrace = "two.csv"\nallocators = "paged,max"\n'
                    'max_num_seqs = 1\napi_overhead = false\nstep_model = "roofline"\n'
                    f"[capacity]\nslo = {1.25 * service / 30!r}\n"
                    "tolerance = 0.05\n")
    assert main([str(spec), "--capacity", "--out", str(tmp_path / "out"), "--workers", "2",
                 "--no-progress"]) == 0
    assert "paged / max capacity: 1.00" in capsys.readouterr().out
    result = json.loads((tmp_path / "out" / "capacity.json").read_text())
    expected = 2 * 1.0 / service
    for row in result["searches"]:
        assert row["status"] == "ok"
        assert row["capacity_rate_scale"] <= expected < row["upper_rate_scale"]
        assert row["upper_rate_scale"] - row["capacity_rate_scale"] <= 0.05 * expected
        assert row["capacity_req_s"] == pytest.approx(row["capacity_rate_scale"] * 1.0)


def test_a_probe_that_rejects_every_request_is_a_miss(tmp_path: Path) -> None:
    """Prompts over max_model_len: every probe's run rejects every request (simulate.py
    exits 2 with its results); the search counts each as a miss, not as a failure."""
    trace = tmp_path / "long.csv"
    trace.write_text("Timestamp,Request tokens,Response tokens\n0,5000,30\n1.0,5000,30\n")
    spec = tmp_path / "cap.toml"
    spec.write_text('[options]\ntrace = "long.csv"\nallocators = "paged"\nstep_model = "roofline"\n'
                    "[capacity]\nslo = 1.0\nmin_rate_scale = 0.25\n")
    assert main([str(spec), "--capacity", "--out", str(tmp_path / "out"), "--workers", "1",
                 "--no-progress"]) == 0
    (row,) = json.loads((tmp_path / "out" / "capacity.json").read_text())["searches"]
    assert row["status"] == "below_min" and row["error"] is None
    assert row["capacity_rate_scale"] is None and row["num_probes"] == 3
    assert all(value is None for _, value in row["probes"])
