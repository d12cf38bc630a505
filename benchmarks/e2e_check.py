"""End-to-end check: simulated request latencies against the same schedule's executed steps.

    PYTHONPATH=. python benchmarks/e2e_check.py prepare DIR      # simulate (CPU)
    PYTHONPATH=. python -m kernels.execute DIR/NAME/allocation_log.jsonl.gz --device cuda \\
        --per-class 1 --no-parts --out DIR/NAME/executed_steps.jsonl    # GPU, per scenario
    PYTHONPATH=. python benchmarks/e2e_check.py compare DIR [--json F]

``prepare`` simulates each scenario (Llama-3-8B on one H200, open-loop Poisson arrivals, the
default calibrated step model, paged manager) with the allocation log recorded and the CPU
side of a step set to zero, so that simulated and executed times both cover the GPU steps
alone. ``compare`` retimes each schedule with the executed steps (benchmarks/e2e_retime.py)
and prints mean TTFT, TPOT, ITL and E2E, simulated and executed, and the per-step error of
the executed steps. This measures agreement with our own forward on our own kernels on the
sampled steps (unsampled ones are scaled by their class's measured ratio), not with vLLM.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from e2e_retime import Steps, class_ratios, compare, measured_gpu

from kernels.execute.run import step_key

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["--model", "Llama-3-8B", "--gpu", "H200-141GB", "--allocators", "paged",
          "--record-allocation-log", "--cpu-overhead-ms", "0", "--cpu-per-seq-us", "0",
          "--seed", "0", "--dataset-name", "random", "--overwrite", "--no-progress"]
SCENARIOS: dict[str, list[str]] = {
    "decode-heavy": ["--random-input-len", "256", "--random-output-len", "256",
                     "--num-prompts", "48", "--request-rate", "16"],
    "prefill-heavy": ["--random-input-len", "2048", "--random-output-len", "16",
                      "--num-prompts", "48", "--request-rate", "8"],
    "mixed-chunked": ["--random-input-len", "1024", "--random-output-len", "64",
                      "--num-prompts", "24", "--request-rate", "8",
                      "--max-num-batched-tokens", "512"],
}
METRICS = ("ttft", "tpot", "itl", "e2e")


def prepare(out: Path) -> None:
    """Simulate every scenario into out/NAME (the simulator's own results directory)."""
    for name, options in SCENARIOS.items():
        cmd = [sys.executable, str(ROOT / "simulate.py"), *COMMON, *options,
               "--out", str(out / name)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        print(f"{name}: {out / name}")


def _log_classes(path: Path) -> dict[int, str | None]:
    """Shape class of every logged step, by step index."""
    classes: dict[int, str | None] = {}
    with gzip.open(path, "rt") as fh:
        for line in fh:
            obj = json.loads(line)
            if obj.get("kind") == "step":
                classes[int(obj["step"])] = step_key(obj, str(path))
    return classes


def _executed(path: Path) -> dict[int, float]:
    """Measured GPU seconds per executed step: the graph time (else eager) plus moves."""
    out: dict[int, float] = {}
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        if obj.get("kind") == "step":
            gpu = obj.get("graph_s") or obj["eager_s"]
            out[int(obj["step"])] = gpu + (obj.get("moves_s") or 0.0)
    return out


def check(run: Path) -> dict[str, Any]:
    """One scenario: latencies simulated vs executed, and the executed steps' errors."""
    steps = pd.read_parquet(run / "steps.parquet").sort_values("step")
    reqs = pd.read_parquet(run / "requests.parquet")
    reqs = reqs[reqs["status"] == "finished"]
    gpu = (steps["attention_s"] + steps["linear_s"] + steps["swap_s"]).to_numpy()
    sched = Steps(steps["time_s"].to_numpy(), steps["duration_s"].to_numpy(), gpu)
    index = {int(s): i for i, s in enumerate(steps["step"])}
    logged = _log_classes(run / "allocation_log.jsonl.gz")
    measured = {index[s]: t for s, t in _executed(run / "executed_steps.jsonl").items()}
    classes = [logged.get(int(s)) for s in steps["step"]]
    predicted = {i: float(gpu[i]) for i in measured}
    ratios = class_ratios(predicted, measured, dict(enumerate(classes)))
    metrics = compare(sched, measured_gpu(sched, measured, classes, ratios),
                      reqs["arrival_s"].to_numpy(), reqs["first_token_s"].to_numpy(),
                      reqs["finish_s"].to_numpy(), reqs["output_tokens"].to_numpy())
    errors = sorted(abs(predicted[i] / measured[i] - 1) for i in measured)
    return {"metrics": metrics, "num_steps": len(steps), "num_executed": len(measured),
            "num_classes": len(ratios), "num_requests": len(reqs),
            "step_error_median": statistics.median(errors),
            "step_error_p90": errors[min(len(errors) - 1, int(0.9 * len(errors)))]}


def report(results: dict[str, dict[str, Any]]) -> list[str]:
    """The table: per scenario and metric, simulated and executed means and the error."""
    lines = [f"{'scenario':<14} {'metric':<5} {'simulated':>10} {'executed':>10} {'error':>7}"]
    for name, res in results.items():
        for metric in METRICS:
            m = res["metrics"][metric]
            lines.append(f"{name:<14} {metric:<5} {m['simulated'] * 1e3:>8.2f}ms "
                         f"{m['executed'] * 1e3:>8.2f}ms {m['error']:>+7.1%}")
        lines.append(f"{name:<14} steps {res['num_executed']} of {res['num_steps']} executed "
                     f"({res['num_classes']} classes); per-step |error| median "
                     f"{res['step_error_median']:.1%}, p90 {res['step_error_p90']:.1%}")
    return lines


def _write_json(path: Path, obj: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    with os.fdopen(fd, "w") as fh:
        json.dump(obj, fh, indent=1)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("prepare", "compare"))
    parser.add_argument("dir", type=Path, help="one subdirectory per scenario")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.phase == "prepare":
        prepare(args.dir)
        return 0
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
        _write_json(args.json, results)
    return 0


if __name__ == "__main__":
    np.seterr(all="raise")
    raise SystemExit(main())
