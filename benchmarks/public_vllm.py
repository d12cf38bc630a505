"""pagedsim against public real-vLLM latency measurements: the cases, and an error table.

    PYTHONPATH=. python benchmarks/public_vllm.py [--case NAME ...] [--step-model SPEC]
        [--json FILE]

Each case is a published `vllm serve` + benchmark-client run (its URL, model, GPU, TP, vLLM
version, lengths, concurrency and number of prompts) written as simulate.py options, with the
figures the source printed. Every case runs twice, with the default request path outside the
engine and with --no-api-overhead (the engine alone), and the table shows measured, simulated
and error % per metric. None of these cases was used to fit anything (the API path's defaults
come from issue 17's H100 figure, sim/cost/api_path.py). No case's model and GPU has a shipped
artefact, so the default step model is the calibrated roofline (efficiencies and floors fitted
on other models' executed steps, applied to the case's GPU): a prediction. Options that a source does not state are assumptions
named in the case's `note`. Models without a preset use the configs in data/public_vllm/.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim.cli import main as simulate

DATA = Path(__file__).resolve().parent / "data" / "public_vllm"
WMX = "https://ai.wmx.dev/benchmarks"
TT = "https://github.com/tenstorrent/tt-inference-server/issues/"
MUSGRAVE = "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on"
TT_NOTE = ("tt-inference-server's GPU reference run (its vLLM benchmark client, random "
           "prompts, fixed lengths); vLLM version not stated: profile 0.14 assumed")


def _random(isl: int, osl: int, conc: int, num: int) -> list[str]:
    return ["--dataset-name", "random", "--random-input-len", str(isl),
            "--random-output-len", str(osl), "--max-concurrency", str(conc),
            "--num-prompts", str(num), "--request-rate", "inf"]


def _case(name: str, url: str, what: str, options: list[str], measured: dict[str, float],
          note: str) -> dict[str, Any]:
    return {"name": name, "source": url, "what": what, "options": options,
            "measured": measured, "note": note}


def _wmx(conc: int, measured: dict[str, float]) -> dict[str, Any]:
    return _case(f"l4-qwen2.5-0.5b-c{conc}", WMX,
                 f"Qwen2.5-0.5B-Instruct, 1 x L4, vLLM 0.23.0, 256/128, concurrency {conc}",
                 ["--model", str(DATA / "Qwen2.5-0.5B"), "--gpu", "l4",
                  "--vllm-version", "0.23", "--gpu-memory-utilization", "0.6",
                  "--max-model-len", "8192", *_random(256, 128, conc, 20 * conc)],
                 measured, "p50 figures; number of prompts not stated: 20 x concurrency assumed")


def _tt(issue: int, what: str, model: str, gpu: str, tp: int, isl: int, osl: int, num: int,
        measured: dict[str, float]) -> dict[str, Any]:
    tag = what.split(",")[0].lower().replace(" ", "")
    return _case(f"tt{issue}-{tag}-{isl}-{osl}", f"{TT}{issue}", what,
                 ["--model", model, "--gpu", gpu, "--tp", str(tp), "--vllm-version", "0.14",
                  *_random(isl, osl, 1, num)], measured, TT_NOTE)


def _means(ttft: float, tpot: float, e2el: float) -> dict[str, float]:
    return {"mean_ttft_ms": ttft, "mean_tpot_ms": tpot, "mean_e2el_ms": e2el}


CASES: list[dict[str, Any]] = [
    _wmx(1, {"median_ttft_ms": 27.0, "median_itl_ms": 5.1, "median_e2el_ms": 679.0,
             "request_throughput": 1.3}),
    _wmx(8, {"median_ttft_ms": 60.9, "median_itl_ms": 5.5, "median_e2el_ms": 772.0,
             "request_throughput": 10.2}),
    _tt(125, "Qwen2.5-7B-Instruct, 1 x RTX 4090, 128/128, concurrency 1", "qwen2.5-7b",
        "rtx-4090", 1, 128, 128, 8, _means(30.8, 17.1, 2199.0)),
    _tt(125, "Qwen2.5-7B-Instruct, 1 x RTX 4090, 1024/128, concurrency 1", "qwen2.5-7b",
        "rtx-4090", 1, 1024, 128, 8, _means(99.6, 17.2, 2278.4)),
    _tt(125, "Qwen2.5-7B-Instruct, 1 x RTX 4090, 128/1024, concurrency 1", "qwen2.5-7b",
        "rtx-4090", 1, 128, 1024, 4, _means(28.2, 17.2, 17590.2)),
    _tt(394, "Qwen3-4B, 1 x RTX 4090, 128/128, concurrency 1", str(DATA / "Qwen3-4B"),
        "rtx-4090", 1, 128, 128, 8, _means(33.1, 10.5, 1366.1)),
    _tt(340, "Qwen3-14B, 1 x A100 (memory not stated: 80GB assumed), 128/128, concurrency 1",
        "qwen3-14b", "a100-80gb", 1, 128, 128, 8, _means(52.5, 24.3, 3133.5)),
    _tt(143, "Qwen2.5-72B-Instruct, 2 x H100, 128/128, concurrency 1",
        str(DATA / "Qwen2.5-72B"), "h100-80gb", 2, 128, 128, 8, _means(41.1, 30.9, 3964.6)),
    _tt(143, "Qwen2.5-72B-Instruct, 2 x H100, 1024/128, concurrency 1",
        str(DATA / "Qwen2.5-72B"), "h100-80gb", 2, 1024, 128, 8, _means(129.2, 31.0, 4062.2)),
    _case("a100-llama-3.1-8b-c1", MUSGRAVE,
          "Llama-3.1-8B-Instruct, 1 x A100 40GB, vLLM 0.23.0, 1024/128, concurrency 1",
          ["--model", "llama-3.1-8b", "--gpu", "a100-40gb", "--vllm-version", "0.23",
           *_random(1024, 128, 1, 20)],
          {"mean_tpot_ms": 1000.0 / 75.0},
          "the text gives decode 'about 75 tokens/sec' at concurrency 1: TPOT ~13.3 ms"),
]


def run_case(case: dict[str, Any], out: Path, *extra: str) -> dict[str, Any]:
    """simulate.py on the case's options; its bench metrics (paged allocator)."""
    args = [*case["options"], *extra, "--allocators", "paged", "--jobs", "1",
            "--no-progress", "--out", str(out), "--overwrite"]
    with contextlib.redirect_stdout(io.StringIO()):
        code = simulate(args)
    if code != 0:
        raise RuntimeError(f"{case['name']}: simulate.py exited {code}")
    summary = json.loads((out / "summary.json").read_text())
    bench: dict[str, Any] = summary["bench"]["allocators"]["paged"]
    return bench


def error_rows(cases: list[dict[str, Any]], *extra: str) -> list[dict[str, Any]]:
    """One row per (case, metric): measured, simulated with and without the API path (each
    with the simulate.py options `extra`), and their errors in % of the measured figure."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            full = run_case(case, Path(tmp) / "full", *extra)
            engine = run_case(case, Path(tmp) / "engine", *extra, "--no-api-overhead")
            for metric, value in case["measured"].items():
                rows.append({"case": case["name"], "metric": metric, "measured": value,
                             "sim": full[metric], "err_pct": 100 * (full[metric] / value - 1),
                             "sim_engine": engine[metric],
                             "err_engine_pct": 100 * (engine[metric] / value - 1)})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'case':34} {'metric':19} {'measured':>9} {'pagedsim':>9} {'err %':>7} "
          f"{'engine only':>11} {'err %':>7}")
    for r in rows:
        print(f"{r['case']:34} {r['metric']:19} {r['measured']:9.1f} {r['sim']:9.1f} "
              f"{r['err_pct']:+7.1f} {r['sim_engine']:11.1f} {r['err_engine_pct']:+7.1f}")
    for key in ("err_pct", "err_engine_pct"):
        for metric in ("ttft", "tpot", "itl", "e2el"):
            errs = sorted(abs(r[key]) for r in rows if metric in r["metric"])
            if errs:
                label = "pagedsim" if key == "err_pct" else "engine only"
                print(f"median |error| {metric:5} {label:12} {errs[len(errs) // 2]:6.1f} % "
                      f"({len(errs)} figures)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="run only this case (repeatable)")
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--step-model", metavar="SPEC",
                        help="simulate.py's --step-model for every case (default: its own, "
                             "auto)")
    args = parser.parse_args(argv)
    names = {c["name"] for c in CASES}
    unknown = sorted(set(args.case or ()) - names)
    if unknown:
        print(f"public_vllm.py: --case {unknown[0]}: unknown; known: {', '.join(sorted(names))}",
              file=sys.stderr)
        return 2
    cases = [c for c in CASES if not args.case or c["name"] in args.case]
    rows = error_rows(cases, *(["--step-model", args.step_model] if args.step_model else []))
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
