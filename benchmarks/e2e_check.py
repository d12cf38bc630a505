"""End-to-end check: simulated request latencies against the same schedule's executed steps.

    PYTHONPATH=. python benchmarks/e2e_check.py prepare DIR      # simulate (CPU)
    PYTHONPATH=. python -m kernels.execute DIR/NAME/allocation_log.jsonl.gz --device cuda \\
        --per-class 1 --no-parts --out DIR/NAME/executed_steps.jsonl    # GPU, per scenario
    PYTHONPATH=. python benchmarks/e2e_check.py compare DIR [--json F]

``prepare`` simulates each scenario (Llama-3-8B, or Mixtral-8x7B for ``moe-chunked``, on one
H200 unless ``--gpu`` names another preset; open-loop Poisson arrivals, the default step
model, paged manager) with the allocation log recorded, the CPU side of a step set to zero
and the API path off, so that simulated and executed times both cover the GPU steps alone. The executor runs a sample of each schedule's steps (every shape
class). ``compare`` simulates each scenario again with step times taken from the executed
steps (each step's prediction times its class's median measured / predicted ratio,
benchmarks/e2e_measured.py: open loop, so the schedule follows the measured times, as a
faster or slower engine's would) and prints mean TTFT, TPOT, ITL and E2E of both runs (vllm
bench serve's definitions, sim/results/bench.py), their error (simulated / executed - 1) and
the per-step error of the executed steps. This measures agreement with our own forward on
our own kernels, not with vLLM.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from e2e_measured import MeasuredStep, class_ratios
from step_errors import median_p90

import traces
from kernels.execute.run import step_key
from kernels.validate.log import iter_objects
from sim.cli import parse_options, resolve
from sim.cost.step_base import StepModel
from sim.engine import build_costs, replay
from sim.results.bench import bench_metrics
from sim.results.outputs import write_json
from sim.workload.source import load_input

ROOT = Path(__file__).resolve().parents[1]
GPU = "H200-141GB"
COMMON = ["--model", "Llama-3-8B", "--allocators", "paged",
          "--record-allocation-log", "--cpu-overhead-ms", "0", "--cpu-per-seq-us", "0",
          "--no-api-overhead",
          "--seed", "0", "--overwrite", "--no-progress"]
RANDOM = ["--dataset-name", "random"]
SCENARIOS: dict[str, list[str]] = {
    "decode-heavy": [*RANDOM, "--random-input-len", "256", "--random-output-len", "256",
                     "--num-prompts", "48", "--request-rate", "16"],
    "prefill-heavy": [*RANDOM, "--random-input-len", "2048", "--random-output-len", "16",
                      "--num-prompts", "48", "--request-rate", "8"],
    "mixed-chunked": [*RANDOM, "--random-input-len", "1024", "--random-output-len", "64",
                      "--num-prompts", "24", "--request-rate", "8",
                      "--max-num-batched-tokens", "512"],
    # An MoE model: its grouped expert GEMMs bend the linear part over 300-512 rows.
    "moe-chunked": [*RANDOM, "--random-input-len", "1024", "--random-output-len", "64",
                    "--num-prompts", "24", "--request-rate", "4",
                    "--max-num-batched-tokens", "512", "--model", "Mixtral-8x7B"],
}
METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}
"""Reported metric -> its vllm bench serve name (``mean_<name>_ms``)."""


def prepare(out: Path, gpu: str) -> int:
    """Simulate every scenario into out/NAME (the simulator's own results directory). A
    scenario the simulator refuses (a model that does not fit the GPU) is skipped with its
    reason; exit code 2 when none could be prepared."""
    prepared = 0
    for name, options in SCENARIOS.items():
        cmd = [sys.executable, str(ROOT / "simulate.py"), "--gpu", gpu, *COMMON, *options,
               "--out", str(out / name)]
        done = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT)
        if done.returncode:
            reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
            print(f"{name}: skipped ({reason})")
            continue
        prepared += 1
        print(f"{name}: {out / name}")
    return 0 if prepared else 2


def read_classes(path: Path) -> dict[int, str | None]:
    """Shape class of every logged step of an allocation log, by step index."""
    return {int(obj["step"]): step_key(obj, f"{path}:{line}")
            for line, obj in iter_objects(path) if obj["kind"] == "step"}


def step_classes(run: Path, rows: list[dict[str, Any]]) -> dict[int, str | None]:
    """Shape class of each executed step: the one kernels.execute wrote beside it, else the
    scenario's allocation log's (so a kept run needs no log)."""
    if all("class" in obj for obj in rows):
        return {int(obj["step"]): obj["class"] for obj in rows}
    return read_classes(run / "allocation_log.jsonl.gz")


def _executed_steps(path: Path) -> list[dict[str, Any]]:
    """The step lines of an executed-steps file (kernels/execute/output.py)."""
    return [obj for obj in map(json.loads, path.read_text().splitlines())
            if obj.get("kind") == "step"]


def _measured(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Measured GPU seconds per executed step: the graph time (else eager) plus moves."""
    return {int(obj["step"]): (obj.get("graph_s") or obj["eager_s"])
            + (obj.get("moves_s") or 0.0) for obj in rows}


def _repredicted(rows: list[dict[str, Any]], step: StepModel, swap_of: dict[int, float]
                 ) -> dict[int, float]:
    """GPU seconds the current step model gives each executed step's batch (plus the
    simulated swap time): the ratios must divide by the model being checked, not by the one
    that priced the steps when the scenario was prepared."""
    out: dict[int, float] = {}
    cap = step.decode_context_cap
    for obj in rows:
        b = obj["batch"]
        decodes, ctx = int(b["num_decode"]), int(b["decode_context_sum"])
        if cap is not None and decodes:
            ctx = min(ctx, decodes * cap)
        st = step.predict_split(decodes, ctx, [(int(n), int(c)) for n, c in b["prefill"]])
        out[int(obj["step"])] = st.attention_s + st.linear_s + swap_of[int(obj["step"])]
    return out


class Scenario:
    """One scenario resolved once: its options, configuration, trace and costs."""

    def __init__(self, name: str, gpu: str = GPU) -> None:
        options = parse_options(["--gpu", gpu, *COMMON, *SCENARIOS[name]])
        self.options = dataclasses.replace(options, record_allocation_log=False)
        self.config = resolve(self.options)
        self.trace, _ = load_input(self.config.workload, traces)
        self.costs = build_costs(self.config)

    def latencies(self, step_model: StepModel) -> dict[str, float]:
        """Mean TTFT, TPOT, ITL and E2E (seconds, vllm bench serve's definitions:
        sim/results/bench.py) of the scenario simulated in this process with
        ``step_model``, without the allocation log."""
        log = replay("paged", self.config, self.trace,
                     self.costs._replace(step_model=step_model)).log
        steps = log.step_columns()
        ends = np.add(steps["time_s"], steps["duration_s"])
        bench = bench_metrics(log.request_columns(), ends, self.options)
        return {metric: bench[f"mean_{name}_ms"] / 1e3 for metric, name in METRICS.items()}


def check(run: Path) -> dict[str, Any]:
    """One scenario: latencies simulated vs re-simulated with the measured step times, and
    the executed steps' own errors."""
    steps = pd.read_parquet(run / "steps.parquet")
    swap_of = dict(zip(steps["step"].astype(int), steps["swap_s"].astype(float)))
    rows = _executed_steps(run / "executed_steps.jsonl")
    classes = step_classes(run, rows)
    measured = _measured(rows)
    # The GPU the scenario was prepared for (its config.json), so that a run prepared with
    # --gpu is re-simulated on the same preset.
    gpu = json.loads((run / "config.json").read_text())["gpu"]["name"]
    scenario = Scenario(run.name, gpu)
    base = scenario.costs.step_model
    predicted = _repredicted(rows, base, swap_of)
    ratios = class_ratios(predicted, measured, classes)
    simulated = scenario.latencies(base)
    measured_model = MeasuredStep(base, ratios)
    executed = scenario.latencies(measured_model)
    metrics = {k: {"simulated": simulated[k], "executed": executed[k],
                   "error": simulated[k] / executed[k] - 1 if executed[k] else 0.0}
               for k in METRICS}
    median, p90 = median_p90([abs(predicted[s] / measured[s] - 1) for s in measured])
    return {"metrics": metrics, "num_steps": len(steps), "num_executed": len(measured),
            "num_classes": len(ratios), "unmeasured_class_steps": measured_model.misses,
            "step_error_median": median, "step_error_p90": p90}


def report(results: dict[str, dict[str, Any]]) -> list[str]:
    """The table: per scenario and metric, simulated and executed means and the error."""
    lines = [f"{'scenario':<14} {'metric':<5} {'simulated':>10} {'executed':>10} {'error':>7}"]
    for name, res in results.items():
        for metric in METRICS:
            m = res["metrics"][metric]
            lines.append(f"{name:<14} {metric:<5} {m['simulated'] * 1e3:>8.2f}ms "
                         f"{m['executed'] * 1e3:>8.2f}ms {m['error']:>+7.1%}")
        lines.append(f"{name:<14} steps {res['num_executed']} of {res['num_steps']} executed "
                     f"({res['num_classes']} classes; {res['unmeasured_class_steps']} "
                     "re-simulated steps of other classes); per-step |error| median "
                     f"{res['step_error_median']:.1%}, p90 {res['step_error_p90']:.1%}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("prepare", "compare"))
    parser.add_argument("dir", type=Path, help="one subdirectory per scenario")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--gpu", default=GPU,
                        help="GPU preset the scenarios are simulated for (prepare; compare "
                             "reads it from each scenario's config.json)")
    args = parser.parse_args(argv)
    if args.phase == "prepare":
        return prepare(args.dir, args.gpu)
    runs = [args.dir / name for name in SCENARIOS if (args.dir / name).is_dir()]
    missing = [r for r in runs if not (r / "executed_steps.jsonl").is_file()]
    if not runs or missing:
        what = missing[0] / "executed_steps.jsonl" if missing else args.dir / "NAME"
        print(f"e2e_check: {what} not found (run kernels.execute on the scenario's "
              "allocation_log.jsonl.gz first)", file=sys.stderr)
        return 2
    results = {run.name: check(run) for run in runs}
    print("\n".join(report(results)))
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    np.seterr(all="raise")
    raise SystemExit(main())
