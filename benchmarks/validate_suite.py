"""Scenario suite: record allocation logs with simulate.py, then validate them on the kernels.

`python benchmarks/validate_suite.py [--device cuda] [--out DIR] [--phase record|validate|all]`

Record (any CPU machine with the simulator's dependencies and ../shared/traces) runs
`simulate.py --allocators paged --record-allocation-log` once per scenario into
`DIR/<scenario>/`; validate (the GPU machine: torch + triton only, no traces, no simpy)
replays every `DIR/*/allocation_log.jsonl.gz` through `kernels.validate` in one process and
writes `DIR/suite.json` and a Markdown table `DIR/suite.md`. DIR defaults to
`.gpu_data/validate_suite` (git-ignored), so a GPU run can carry the logs. On the CPU the
layer is shrunk (1 KV head x 16, fp32) and only the first steps are compared, to keep it short.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRACES = ROOT.parent / "shared" / "traces"
AZURE = "AzureLLMInferenceTrace_conv.csv"
MOONCAKE = "mooncake_conversation_trace.jsonl"
COMMON = ["--allocators", "paged", "--gpu", "h200", "--no-progress", "--seed", "0"]
# Mistral-7B's layout with a 256-token window, so that Azure prompts slide past it.
SHORT_WINDOW_MISTRAL = {
    "model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
    "sliding_window": 256, "torch_dtype": "bfloat16", "_name_or_path": "Mistral-7B-window256"}

# name -> (trace, simulate.py options, steps compared on the GPU: None = all)
SCENARIOS: dict[str, tuple[str, list[str], int | None]] = {
    "azure-conv": (AZURE, ["--model", "llama-3-8b", "--limit", "60", "--rate-scale", "16"], 400),
    "mooncake-prefix": (MOONCAKE, ["--model", "llama-3.1-8b", "--limit", "24",
                                   "--max-model-len", "16384", "--num-gpu-blocks", "2200",
                                   "--rate-scale", "4"], 150),
    "azure-conv-fp8": (AZURE, ["--model", "llama-3-8b", "--kv-cache-dtype", "fp8", "--limit",
                               "60", "--rate-scale", "16"], 300),
    "n4-cow": (AZURE, ["--model", "llama-3-8b", "--limit", "12", "--n", "4",
                       "--sampling-mode", "cow", "--rate-scale", "4"], 200),
    "n4-fanout": (AZURE, ["--model", "llama-3-8b", "--limit", "12", "--n", "4",
                          "--sampling-mode", "fanout", "--rate-scale", "4"], 200),
    "beam4": (AZURE, ["--model", "llama-3-8b", "--limit", "8", "--beam-width", "4",
                      "--rate-scale", "4"], 200),
    "sliding-window": (AZURE, ["--model", "{window_config}", "--limit", "24",
                               "--rate-scale", "4"], 200),
    "preempt-recompute": (AZURE, ["--model", "llama-3-8b", "--limit", "120",
                                  "--num-gpu-blocks", "400", "--rate-scale", "16"], 150),
    "preempt-swap": (AZURE, ["--model", "llama-3-8b", "--limit", "120", "--num-gpu-blocks",
                             "400", "--preemption", "swap", "--rate-scale", "16"], 150),
}


def record(out: Path, names: list[str], traces: Path) -> None:
    """Run simulate.py for each scenario, writing DIR/<name>/allocation_log.jsonl.gz."""
    window_config = out / "mistral-window256" / "config.json"
    window_config.parent.mkdir(parents=True, exist_ok=True)
    window_config.write_text(json.dumps(SHORT_WINDOW_MISTRAL, indent=1))
    for name in names:
        trace, opts, _ = SCENARIOS[name]
        opts = [o.replace("{window_config}", str(window_config)) for o in opts]
        cmd = [sys.executable, str(ROOT / "simulate.py"), str(traces / trace), *COMMON, *opts,
               "--record-allocation-log", "--out", str(out / name)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.exit(f"record {name}: simulate.py failed ({proc.returncode}):\n{proc.stderr}")
        (out / name / "simulate.txt").write_text(" ".join(cmd) + "\n\n" + proc.stdout)
        size = (out / name / "allocation_log.jsonl.gz").stat().st_size
        print(f"recorded {name}: {size / 2**20:.1f} MiB log in "
              f"{time.perf_counter() - start:.0f} s", flush=True)


def validate_apart(out: Path, names: list[str], device: str, steps: int | None
                   ) -> list[dict[str, Any]]:
    """Each scenario in a process of its own (CUDA): the caches of one section, up to 112 GiB,
    are handed back whole before the next one's memory check (in one process later sections
    found the earlier caches still held and failed that check, 2026-12-01/02)."""
    rows: list[dict[str, Any]] = []
    for name in names:
        rows_file = out / name / "rows.json"
        rows_file.unlink(missing_ok=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", "validate", "--device",
               device, "--only", name, "--out", str(out), "--rows", str(rows_file)]
        subprocess.run(cmd + (["--steps", str(steps)] if steps is not None else []),
                       cwd=ROOT, check=False)
        if rows_file.exists():
            rows += json.loads(rows_file.read_text())
        else:
            rows.append({"scenario": name, "passed": False,
                         "failure": "its validation process failed", "wall_s": None})
        _save(out, rows, device)
    return rows


def validate(out: Path, names: list[str], device: str, steps: int | None) -> list[dict[str, Any]]:
    """Validate every recorded scenario in this process; returns one row per scenario.

    Rows are written to DIR/suite.json and DIR/suite.md after each scenario, so a run cut
    short still leaves what it measured; an exception fails that scenario only.
    """
    from kernels.validate import CPU_SHRINK, Options, format_section, validate_log, write_report

    rows: list[dict[str, Any]] = []
    for name in names:
        log = out / name / "allocation_log.jsonl.gz"
        cpu = device == "cpu"
        n = steps if steps is not None else (20 if cpu else SCENARIOS[name][2])
        opts = Options(device=device, steps=n, **(CPU_SHRINK if cpu else {}))
        start = time.perf_counter()
        try:
            results = validate_log(log, opts)
        except Exception as exc:  # noqa: BLE001 (one broken scenario must not hide the others)
            print(f"[{name}] ERROR {type(exc).__name__}: {exc}", flush=True)
            rows.append({"scenario": name, "passed": False, "failure": f"{type(exc).__name__}: "
                         f"{exc}", "wall_s": time.perf_counter() - start})
            continue
        wall = time.perf_counter() - start
        write_report(out / name / "validation.json", log, results)
        for res in results:
            print(f"[{name}] {wall:.1f} s\n{format_section(res, device)}", flush=True)
            rows.append(_row(name, res, wall))
        _save(out, rows, device)
    return rows


def _save(out: Path, rows: list[dict[str, Any]], device: str) -> None:
    (out / "suite.json").write_text(json.dumps(rows, indent=1))
    (out / "suite.md").write_text(markdown(rows, device))


def _row(name: str, res: Any, wall: float) -> dict[str, Any]:
    mem = res.memory
    return {"scenario": name, "passed": not res.failed, "steps": res.num_steps,
            "compared": res.num_validated, "seq_checks": res.num_seq_checks,
            "max_error": res.max_error, "tolerance": res.tolerance, "dtype": res.dtype,
            "timing": res.timing, "unverified_tokens": res.unverified_tokens,
            "kv_bytes_all_layers": mem.get("all_layers_bytes"),
            "free_after_bytes": mem.get("free_after_bytes"), "fits": mem.get("fits"),
            "failure": res.failure, "wall_s": wall}


def markdown(rows: list[dict[str, Any]], device: str) -> str:
    """The suite's results as a Markdown table."""
    lines = [(f"| scenario | steps | compared | seq checks | max error ({device}) | timing "
              "median / p90 abs rel err (bias) | all-layer KV | headroom | result |"),
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        if "steps" not in r:
            lines.append(f"| {r['scenario']} | - | - | - | - | - | - | - | ERROR {r['failure']} |")
            continue
        t = r["timing"]
        timing = (f"{t['median_abs_rel_error']:.0%} / {t['p90_abs_rel_error']:.0%} "
                  f"({t['median_rel_error']:+.0%})" if t else "-")
        kv = r["kv_bytes_all_layers"] / 2**30
        free = f"{r['free_after_bytes'] / 2**30:.1f} GiB" if r["free_after_bytes"] else "-"
        result = "pass" if r["passed"] else "FAIL"
        if r["unverified_tokens"]:
            result += f" ({r['unverified_tokens']} prefix tokens unverified)"
        lines.append(f"| {r['scenario']} | {r['steps']} | {r['compared']} | {r['seq_checks']} | "
                     f"{r['max_error']:.2e} ({r['dtype']}) | {timing} | {kv:.1f} GiB | {free} | "
                     f"{result} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="validation device (default: cuda if available)")
    p.add_argument("--out", type=Path, default=ROOT / ".gpu_data" / "validate_suite")
    p.add_argument("--phase", choices=("record", "validate", "all"), default="all")
    p.add_argument("--only", help="comma-separated scenario names (default: all)")
    p.add_argument("--steps", type=int, help="override the steps compared per scenario")
    p.add_argument("--traces", type=Path, default=TRACES)
    p.add_argument("--rows", type=Path, help=argparse.SUPPRESS)  # a child of validate_apart
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"error: unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}",
              file=sys.stderr)
        return 2
    if args.phase in ("record", "all"):
        record(args.out, names, args.traces)
    if args.phase == "record":
        return 0
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.rows is not None:
        rows = validate(args.out, names, device, args.steps)
        args.rows.write_text(json.dumps(rows, indent=1))
        return 0 if all(row["passed"] for row in rows) else 1
    if device == "cuda" and len(names) > 1:
        rows = validate_apart(args.out, names, device, args.steps)
    else:
        rows = validate(args.out, names, device, args.steps)
    _save(args.out, rows, device)
    print(markdown(rows, device))
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
