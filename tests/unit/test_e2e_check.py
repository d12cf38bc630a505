"""benchmarks/e2e_check.py and e2e_measured.py: simulated latencies against a simulation whose
step times are the executed steps' (per shape class)."""
from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest

from kernels.execute.sample import shape_key
from sim.cost.step_base import StepModel, StepTime
from tests.benchkit import load_benchmark

measured_mod = load_benchmark("e2e_measured")
check_mod = load_benchmark("e2e_check")


class Flat(StepModel):
    """1 ms of attention and 2 ms of linear per step, 0.5 ms overhead."""

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: object) -> StepTime:
        return StepTime(1e-3, 2e-3, 5e-4)


def test_split_key_is_the_executors_class_of_the_same_batch() -> None:
    """Decodes at contexts 10, 20 and 33 (mean 21) plus chunks (8 new over 0 cached, 100 over
    900): the same key as the executor computes from the sequences' spans."""
    spans = [(10, 11), (20, 21), (33, 34), (0, 8), (900, 1000)]
    assert measured_mod.split_key(3, 63, [(8, 0), (100, 900)]) == shape_key(spans, False, False)
    assert measured_mod.split_key(0, 0, [(8, 0)]) == shape_key([(0, 8)], False, False)


def test_class_ratios_take_the_median_and_drop_move_suffixes() -> None:
    classes = {0: "a", 1: "a", 2: "a", 3: "b-copy", 4: None}
    ratios = measured_mod.class_ratios({0: 1.0, 1: 1.0, 2: 1.0, 3: 2.0},
                                       {0: 1.1, 1: 1.5, 2: 1.2, 3: 3.0}, classes)
    assert ratios == pytest.approx({"a": 1.2, "b": 1.5})


def test_measured_step_scales_gpu_parts_by_the_class_ratio_or_the_median() -> None:
    key = measured_mod.split_key(2, 100, [])
    model = measured_mod.MeasuredStep(Flat(), {key: 1.5, "other": 0.5, "third": 1.0})
    st = model.predict_split(2, 100, [])
    assert (st.attention_s, st.linear_s, st.overhead_s) == pytest.approx((1.5e-3, 3e-3, 5e-4))
    assert model.misses == 0
    miss = model.predict_split(64, 64 * 4000, [])  # no ratio for this class: the median 1.0
    assert (miss.attention_s, miss.linear_s) == pytest.approx((1e-3, 2e-3))
    assert model.misses == 1
    with pytest.raises(ValueError, match="no executed step"):
        measured_mod.MeasuredStep(Flat(), {})


class Doubled(StepModel):
    """Another step model than the one a run was prepared with: twice its GPU parts."""

    def __init__(self, base: StepModel) -> None:
        self.base, self.decode_context_cap = base, base.decode_context_cap
        self.description = "doubled"

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        st = self.base.predict_split(num_decode, sum_decode_context, prefills)
        return StepTime(2 * st.attention_s, 2 * st.linear_s, st.overhead_s)


def _batches(log: Path) -> dict[int, dict[str, object]]:
    """Each logged step's batch as the executor records it: one-token spans after a context
    are decodes, the others prefill chunks [new, cached]."""
    out: dict[int, dict[str, object]] = {}
    with gzip.open(log, "rt") as fh:
        for line in fh:
            obj = json.loads(line)
            if obj.get("kind") != "step":
                continue
            spans = [tuple(seq["positions"]) for seq in obj["seqs"]]
            decodes = [s for s, e in spans if e - s == 1 and s > 0]
            out[int(obj["step"])] = {"num_decode": len(decodes),
                                     "decode_context_sum": sum(decodes),
                                     "prefill": [[e - s, s] for s, e in spans
                                                 if not (e - s == 1 and s > 0) and e > s]}
    return out


def test_check_on_a_simulated_run_with_synthetic_executed_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every executed step measured at 1.25x its prediction, one per class: the re-simulated
    run (CPU side zero, every request at time 0) is 1.25x slower on every latency, so the
    simulation's error is 1 / 1.25 - 1 = -20 %. The ratios divide by the step model's own
    prediction of each executed batch, which must equal the one the run recorded."""
    rows = [{"prompt_len": 40 + 8 * i, "output_len": 6 + i, "arrival_s": 0.0}
            for i in range(6)]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(rows))
    monkeypatch.setattr(check_mod, "SCENARIOS", {"tiny": [str(trace)]})
    # Prepared for another GPU than the default: compare must re-simulate on that GPU (its
    # config.json), or the ratios below would not come out at 1.25.
    check_mod.prepare(tmp_path, "H100-80GB")
    run = tmp_path / "tiny"
    assert json.loads((run / "config.json").read_text())["gpu"]["name"] == "H100-80GB"
    steps = pd.read_parquet(run / "steps.parquet")
    classes = check_mod.read_classes(run / "allocation_log.jsonl.gz")
    assert len(classes) == len(steps)
    batches = _batches(run / "allocation_log.jsonl.gz")
    seen: set[str | None] = set()
    lines = []
    for row in steps.itertuples():
        if classes[row.step] not in seen:
            seen.add(classes[row.step])
            gpu = 1.25 * (row.attention_s + row.linear_s)
            lines.append(json.dumps({"kind": "step", "step": row.step, "graph_s": gpu,
                                     "eager_s": 2 * gpu, "moves_s": 0.0,
                                     "batch": batches[row.step]}))
    assert len(lines) < len(steps)
    assert check_mod.main(["compare", str(tmp_path)]) == 2  # no executed steps yet
    (run / "executed_steps.jsonl").write_text("\n".join(lines) + "\n")
    assert (steps["overhead_s"] == 0).all()
    result = check_mod.check(run)
    for metric in check_mod.METRICS:
        m = result["metrics"][metric]
        assert m["executed"] == pytest.approx(1.25 * m["simulated"], rel=1e-9)
        assert m["error"] == pytest.approx(-0.2, rel=1e-9)
    assert result["unmeasured_class_steps"] == 0
    assert result["step_error_median"] == pytest.approx(0.2, rel=1e-9)
    out = tmp_path / "r.json"
    assert check_mod.main(["compare", str(tmp_path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["tiny"]["num_executed"] == len(lines)
    # A step model changed since the run was prepared (here: twice as slow) is checked
    # against the same measurements: 2 / 1.25 - 1 = +60 %, not the prepared model's -20 %.
    build = check_mod.build_costs
    monkeypatch.setattr(check_mod, "build_costs", lambda config: build(config)._replace(
        step_model=Doubled(build(config).step_model)))
    for metric, m in check_mod.check(run)["metrics"].items():
        assert m["error"] == pytest.approx(0.6, rel=1e-9), metric


def test_prepare_skips_a_scenario_the_simulator_refuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mixtral-8x7B's weights do not fit one H100: that scenario is skipped with the
    simulator's reason, and prepare fails (exit code 2) only when nothing was prepared."""
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([{"prompt_len": 40, "output_len": 4, "arrival_s": 0.0}]))
    monkeypatch.setattr(check_mod, "SCENARIOS", {"moe": [str(trace), "--model", "Mixtral-8x7B"]})
    assert check_mod.prepare(tmp_path, "H100-80GB") == 2
    assert "moe: skipped (simulate.py: error: model Mixtral-8x7B does not fit" in \
        capsys.readouterr().out
    monkeypatch.setattr(check_mod, "SCENARIOS", {"moe": [str(trace), "--model", "Mixtral-8x7B"],
                                                 "dense": [str(trace)]})
    assert check_mod.prepare(tmp_path, "H100-80GB") == 0
    assert (tmp_path / "dense" / "allocation_log.jsonl.gz").is_file()
    assert not (tmp_path / "moe" / "allocation_log.jsonl.gz").exists()
