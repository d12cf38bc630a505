"""Grid sweeps on the local process pool: merge, resume after a kill, failures, the CLI."""
from __future__ import annotations

import json
import os
from collections import defaultdict
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sim.sweep.backends import LocalBackend
from sim.sweep.cell import TraceCache, run_cell
from sim.sweep.run import main, main_from_simulate, run_sweep
from sim.sweep.spec import load_spec

LOG_ENV = "PAGEDSIM_TEST_SWEEP_LOG"
DIE_ENV = "PAGEDSIM_TEST_SWEEP_DIE_AT"
FAIL_ENV = "PAGEDSIM_TEST_SWEEP_FAIL"
TRACE = ("Timestamp,Request tokens,Response tokens\n"
         "0,100,30\n0.4,120,20\n0.9,80,40\n1.5,200,25\n2.0,50,20\n")
# The plain roofline step model: the default calibrated one is fitted at every cell's start.
GRID = """
[options]
trace = "t.csv"
allocators = "paged,max"
step_model = "roofline"
[axes]
rate_scale = [1, 4]
block_size = {values = [8, 16]}
"""


def _count_call(options: dict[str, Any]) -> int:
    log = Path(os.environ[LOG_ENV])
    with log.open("a") as fh:
        fh.write(json.dumps({"rate_scale": options["rate_scale"],
                             "block_size": options["block_size"]}) + "\n")
    return len(log.read_text().splitlines())


def fake_runner(options: dict[str, Any], out_dir: Path, cache: TraceCache) -> dict[str, Any]:
    """Latency rate_scale x block_size / 100 (max: twice that); dies or fails on request."""
    number = _count_call(options)
    if os.environ.get(DIE_ENV) == str(number):
        os._exit(3)
    if os.environ.get(FAIL_ENV) == f"{options['rate_scale']},{options['block_size']}":
        raise RuntimeError("injected failure")
    latency = options["rate_scale"] * options["block_size"] / 100
    return {"allocators": {"paged": {"norm_latency_mean_s": latency},
                           "max": {"norm_latency_mean_s": 2 * latency}},
            "counters": {"paged": {"num_steps": 7}, "max": {"num_steps": 9}}}


def dying_real_runner(options: dict[str, Any], out_dir: Path,
                      cache: TraceCache) -> dict[str, Any]:
    """The real simulator, but the worker dies after the simulator wrote call N's files."""
    number = _count_call(options)
    summary = run_cell(options, out_dir, cache)
    if os.environ.get(DIE_ENV) == str(number):
        os._exit(3)
    return summary


@pytest.fixture
def grid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "t.csv").write_text(TRACE)
    spec = tmp_path / "grid.toml"
    spec.write_text(GRID)
    monkeypatch.setenv(LOG_ENV, str(tmp_path / "calls.log"))
    return spec


def calls(spec: Path) -> list[dict[str, Any]]:
    log = spec.parent / "calls.log"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def sweep(spec: Path, out: Path, workers: int, runner: Any = fake_runner) -> Any:
    with LocalBackend(workers) as backend:
        return run_sweep(load_spec(spec), out, backend, runner=runner, progress=False)


def without_wall(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame if "wall" in c])


def test_merge_has_one_row_per_cell_and_allocator(grid: Path, tmp_path: Path) -> None:
    """sweep.parquet lists every (cell, allocator) in spec order with axes and summary keys."""
    result = sweep(grid, tmp_path / "out", 2)
    frame = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert list(frame.columns[:6]) == ["cell", "rate_scale", "block_size", "allocator",
                                       "status", "error"]
    assert list(frame["cell"]) == [n for n in ("rate_scale=1__block_size=8",
                                               "rate_scale=1__block_size=16",
                                               "rate_scale=4__block_size=8",
                                               "rate_scale=4__block_size=16") for _ in (0, 1)]
    assert list(frame["allocator"]) == ["paged", "max"] * 4
    expected = [r * b / 100 * k for r in (1, 4) for b in (8, 16) for k in (1, 2)]
    assert frame["norm_latency_mean_s"].tolist() == pytest.approx(expected)
    assert frame["counters.num_steps"].tolist() == [7, 9] * 4
    assert result.num_run == 4 and result.num_failed == 0 and len(calls(grid)) == 4
    sweep_json = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [c["name"] for c in sweep_json["cells"]] == list(frame["cell"][::2])


def test_resume_after_a_killed_worker(grid: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed in cell 2 stops the sweep; a re-run computes only cells 2-4."""
    out = tmp_path / "out"
    monkeypatch.setenv(DIE_ENV, "2")
    with pytest.raises(BrokenProcessPool):
        sweep(grid, out, 1)
    first = out / "cells" / "rate_scale=1__block_size=8" / "cell.json"
    assert first.exists() and len(calls(grid)) == 2
    assert not (out / "sweep.parquet").exists()
    assert any(p.name.startswith(".tmp-") for p in (out / "cells").iterdir())
    mtime = first.stat().st_mtime_ns
    monkeypatch.delenv(DIE_ENV)
    resumed = sweep(grid, out, 2)
    again = calls(grid)[2:]
    assert {(c["rate_scale"], c["block_size"]) for c in again} == {(1, 16), (4, 8), (4, 16)}
    assert len(again) == 3 and resumed.num_run == 3
    assert first.stat().st_mtime_ns == mtime
    assert not any(p.name.startswith(".tmp-") for p in (out / "cells").iterdir())
    fresh = sweep(grid, tmp_path / "fresh", 2)
    pd.testing.assert_frame_equal(resumed.frame, fresh.frame)


def test_failed_cell_is_recorded_and_retried(grid: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """One failing cell gets error.json and a failed row; the others finish; a re-run retries
    only the failed one."""
    out = tmp_path / "out"
    monkeypatch.setenv(FAIL_ENV, "4,8")
    result = sweep(grid, out, 2)
    assert result.num_failed == 1
    failed = result.frame[result.frame["status"] == "failed"]
    assert list(failed["cell"]) == ["rate_scale=4__block_size=8"]
    assert "injected failure" in failed["error"].iloc[0]
    assert (out / "cells" / "rate_scale=4__block_size=8" / "error.json").exists()
    assert (result.frame["status"] == "ok").sum() == 6
    monkeypatch.delenv(FAIL_ENV)
    retried = sweep(grid, out, 2)
    assert retried.num_run == 1 and retried.num_failed == 0 and len(calls(grid)) == 5


def test_changed_options_rerun_the_cells(grid: Path, tmp_path: Path) -> None:
    """A cell whose fixed options changed since it finished is run again."""
    out = tmp_path / "out"
    sweep(grid, out, 2)
    grid.write_text(GRID.replace('allocators = "paged,max"', 'allocators = "paged,max"\nseed = 1'))
    assert sweep(grid, out, 2).num_run == 4 and len(calls(grid)) == 8


def test_real_grid_resumes_after_kill_with_the_same_merge(grid: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """The real simulator on a 2 x 2 grid: the CLI merges it; a sweep killed after its first
    cell resumes without recomputing it and merges to the same table."""
    assert main([str(grid), "--out", str(tmp_path / "cli"), "--workers", "2",
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "4 cells (4 run, 0 already done, 0 failed)" in printed and "paged" in printed
    baseline = pd.read_parquet(tmp_path / "cli" / "sweep.parquet")
    for row in baseline.itertuples():
        summary = json.loads((tmp_path / "cli" / "cells" / row.cell / "summary.json").read_text())
        assert summary["allocators"][row.allocator]["num_finished"] == row.num_finished == 5
        assert summary["allocators"][row.allocator]["duration_s"] == row.duration_s
    out = tmp_path / "killed"
    monkeypatch.setenv(DIE_ENV, "2")
    with pytest.raises(BrokenProcessPool):
        sweep(grid, out, 1, dying_real_runner)
    kept = out / "cells" / "rate_scale=1__block_size=8" / "summary.json"
    mtime = kept.stat().st_mtime_ns
    resumed = sweep(grid, out, 2, run_cell)
    assert resumed.num_run == 3 and kept.stat().st_mtime_ns == mtime
    pd.testing.assert_frame_equal(without_wall(resumed.frame), without_wall(baseline))
    loads = defaultdict(set)
    for record in resumed.records[1:]:
        loads[record["worker"]["pid"]].add(record["worker"]["trace_loads"])
    assert all(len(v) == 1 for v in loads.values())


def test_cli_bad_spec_is_one_line_and_status_2(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown options and refused values exit 2 with one line naming file and key."""
    spec = tmp_path / "bad.toml"
    spec.write_text("[options]\nblock_sise = 8\n")
    assert main([str(spec), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{spec}: options.block_sise" in err
    spec.write_text("[axes]\nblock_size = [8, 0]\n")
    assert main_from_simulate(["--sweep", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{spec}: axes.block_size: --block-size must be >= 1" in err
    assert not (tmp_path / "o").exists()
