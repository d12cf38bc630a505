"""benchmarks/e2e_check.py and e2e_retime.py: a simulated schedule retimed with measured steps."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.benchkit import BENCHMARKS, load_benchmark

retime_mod = load_benchmark("e2e_retime")
check_mod = load_benchmark("e2e_check")


def _steps(start: list[float], duration: list[float], gpu: list[float]) -> Any:
    return retime_mod.Steps(np.array(start), np.array(duration), np.array(gpu))


def test_retime_keeps_times_when_measured_equals_predicted() -> None:
    steps = _steps([0.0, 1.0, 2.0, 5.0], [1.0, 1.0, 1.0, 1.0], [0.8, 0.8, 0.8, 0.8])
    assert retime_mod.retime(steps, steps.gpu).tolist() == [1.0, 2.0, 3.0, 6.0]


def test_retime_shifts_back_to_back_steps_and_waits_for_arrivals() -> None:
    """GPU parts doubled: steps 0-2 run back to back (ends 1.8, 3.6, 5.4); step 3 began
    after an idle engine at 5.0 in the simulation, so it starts at max(5.4, 5.0)."""
    steps = _steps([0.0, 1.0, 2.0, 5.0], [1.0, 1.0, 1.0, 1.0], [0.8, 0.8, 0.8, 0.8])
    ends = retime_mod.retime(steps, steps.gpu * 2)
    assert np.allclose(ends, [1.8, 3.6, 5.4, 7.2])
    faster = retime_mod.retime(steps, steps.gpu / 2)  # 0.6 each: step 3 still waits until 5
    assert np.allclose(faster, [0.6, 1.2, 1.8, 5.6])


def test_unsampled_steps_take_their_class_median_ratio() -> None:
    steps = _steps([0, 1, 2, 3, 4], [1] * 5, [1.0, 2.0, 1.0, 4.0, 1.0])
    classes = ["a", "b", "a", "b", None]
    measured = {0: 1.5, 1: 3.0}
    ratios = retime_mod.class_ratios({0: 1.0, 1: 2.0}, measured, dict(enumerate(classes)))
    assert ratios == {"a": 1.5, "b": 1.5}
    gpu = retime_mod.measured_gpu(steps, measured, classes, ratios)
    assert gpu.tolist() == [1.5, 3.0, 1.5, 6.0, 1.0]


def test_a_request_time_must_be_a_step_end() -> None:
    with pytest.raises(ValueError, match="no step's end"):
        retime_mod.step_of(np.array([1.0, 2.0]), np.array([1.5]))


def _simulate(out: Path) -> None:
    """A small run with every request arriving at once (no idle gaps between steps)."""
    rows = [{"prompt_len": 40 + 8 * i, "output_len": 6 + i, "arrival_s": 0.0}
            for i in range(6)]
    trace = out.parent / "trace.json"
    trace.write_text(json.dumps(rows))
    cmd = [sys.executable, str(BENCHMARKS.parent / "simulate.py"), str(trace),
           *check_mod.COMMON, "--out", str(out)]
    cmd.remove("--dataset-name")
    cmd.remove("random")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=BENCHMARKS.parent)


def test_check_scales_latencies_by_the_measured_ratio(tmp_path: Path) -> None:
    """Every executed step 1.25x its prediction, the CPU side zero, no idle gaps: every step
    end, hence every latency, is 1.25x, also where only some steps were executed."""
    run = tmp_path / "tiny"
    _simulate(run)
    steps = pd.read_parquet(run / "steps.parquet")
    classes = check_mod._log_classes(run / "allocation_log.jsonl.gz")
    seen: set[str | None] = set()
    lines = []
    for row in steps.itertuples():
        if classes[row.step] in seen:
            continue  # one executed step per class: the others are scaled
        seen.add(classes[row.step])
        gpu = row.attention_s + row.linear_s
        lines.append(json.dumps({"kind": "step", "step": row.step, "graph_s": 1.25 * gpu,
                                 "eager_s": 2 * gpu, "moves_s": 0.0}))
    assert len(lines) < len(steps)
    (run / "executed_steps.jsonl").write_text("\n".join(lines) + "\n")
    assert (steps["overhead_s"] == 0).all()
    result = check_mod.check(run)
    for metric in check_mod.METRICS:
        m = result["metrics"][metric]
        assert m["executed"] == pytest.approx(1.25 * m["simulated"], rel=1e-9)
        assert m["error"] == pytest.approx(-0.2, rel=1e-9)
    assert result["step_error_median"] == pytest.approx(0.2, rel=1e-9)
    assert check_mod.main(["compare", str(tmp_path)]) == 2  # the other scenarios are absent
