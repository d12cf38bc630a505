"""The shipped default step model against kept executed schedules (benchmarks/data/executed/):
steps measured on a GPU through our own forward, none of them in any calibration artefact."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.benchkit import BENCHMARKS, load_benchmark

DATA = BENCHMARKS / "data" / "executed"
FILES = sorted(DATA.rglob("*.jsonl"))
E2E = sorted(DATA.glob("*/e2e/*/executed_steps.jsonl"))


def _median_p90(errors: list[float]) -> tuple[float, float]:
    errors = sorted(errors)
    return statistics.median(errors), errors[min(len(errors) - 1, int(0.9 * len(errors)))]


def test_files_are_kept() -> None:
    assert len(FILES) >= 12 and len(E2E) >= 3
    for path in FILES:
        header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        assert header["format"] == "pagedsim-executed-steps", path.name
        assert not Path(header["log"]).is_absolute(), path.name


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(DATA)) for p in FILES])
def test_default_model_within_issue_bounds(path: Path) -> None:
    """Issue 17's per-step bound (median <= 5 %, p90 <= 12 % of the whole step) for the shipped
    fit, and the uncalibrated roofline far outside it (the steps tell models apart)."""
    step_errors = load_benchmark("step_errors")
    title, rows = step_errors.executed_rows(str(path))
    assert "no shipped calibration" not in title
    assert len(rows) >= 20
    fit = _median_p90([abs(r["fit"]["total"] / r["total"] - 1) for r in rows])
    roof = _median_p90([abs(r["roofline"]["total"] / r["total"] - 1) for r in rows])
    assert fit[0] <= 0.05 and fit[1] <= 0.12, (path.name, fit)
    assert roof[0] > 0.15, (path.name, roof)



@pytest.mark.parametrize("path", E2E, ids=[str(p.parent.relative_to(DATA)) for p in E2E])
def test_end_to_end_means_within_five_percent(path: Path) -> None:
    """Issue 17's end-to-end bound: TTFT, TPOT and E2E means simulated with the default model
    within 5 % of the same scenario re-simulated with the kept measured step times."""
    check = load_benchmark("e2e_check").check(path.parent)
    assert check["num_executed"] >= 20 and check["unmeasured_class_steps"] <= 2
    for metric in ("ttft", "tpot", "e2e"):
        error = check["metrics"][metric]["error"]
        assert abs(error) <= 0.05, (metric, error)
