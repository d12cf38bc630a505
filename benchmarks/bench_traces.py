"""Benchmark trace loading: a generated 1M-row Azure-format CSV, then the summary.

Run from the repository root:  PYTHONPATH=. python benchmarks/bench_traces.py [--rows N]
The CSV (wall-clock timestamps with 7 fractional digits, like the 2023 release) and a
Mooncake-format JSONL of the same size are written to a temporary directory and removed
afterwards. When ../shared/traces exists the
real Mooncake trace is timed too. Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from traces import load_trace, summarize
from traces.synthetic import default_workload

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def write_azure_csv(path: Path, rows: int, seed: int = 0) -> None:
    """An Azure-2023-format CSV of `rows` Poisson arrivals at 300 req/s."""
    rng = np.random.default_rng(seed)
    start = pd.Timestamp("2023-11-16 18:00:00")
    offsets = np.cumsum(rng.exponential(1 / 300, size=rows))
    stamps = (start + pd.to_timedelta(offsets, unit="s")).strftime("%Y-%m-%d %H:%M:%S.%f")
    frame = pd.DataFrame(
        {
            "TIMESTAMP": stamps + "0",
            "ContextTokens": rng.integers(1, 8000, size=rows),
            "GeneratedTokens": rng.integers(1, 1000, size=rows),
        }
    )
    frame.to_csv(path, index=False)


def write_mooncake_jsonl(path: Path, rows: int, seed: int = 0) -> None:
    """A Mooncake-format JSONL of `rows` requests with 1-4 hash ids each."""
    rng = np.random.default_rng(seed)
    stamps = np.cumsum(rng.integers(0, 5, size=rows))
    blocks = rng.integers(1, 5, size=rows)
    outputs = rng.integers(1, 500, size=rows)
    with path.open("w") as f:
        for i in range(rows):
            ids = ", ".join(str(4 * i + k) for k in range(int(blocks[i])))
            f.write(
                f'{{"timestamp": {stamps[i]}, "input_length": {512 * blocks[i] - 7}, '
                f'"output_length": {outputs[i]}, "hash_ids": [{ids}]}}\n'
            )


def _timed(label: str, fn, *args):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn(*args)
    print(f"{label}: {time.perf_counter() - t0:.2f} s")
    return out


def main() -> None:
    """Generate, load and summarise; print timings."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, "
        f"python {platform.python_version()}, numpy {np.__version__}, pandas {pd.__version__}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "azure_1m.csv"
        _timed(f"generate {args.rows:,}-row Azure CSV", write_azure_csv, path, args.rows)
        print(f"file size: {path.stat().st_size / 1e6:.1f} MB")
        trace = _timed("load_trace (azure)", load_trace, path)
        _timed("summarize", summarize, trace)
        assert len(trace) == args.rows
        jpath = Path(tmp) / "mooncake_1m.jsonl"
        _timed(f"generate {args.rows:,}-row Mooncake JSONL", write_mooncake_jsonl, jpath, args.rows)
        print(f"file size: {jpath.stat().st_size / 1e6:.1f} MB")
        jtrace = _timed("load_trace (mooncake format)", load_trace, jpath)
        _timed("summarize (hash-id prefix reuse)", summarize, jtrace)
    mooncake = SHARED / "mooncake_conversation_trace.jsonl"
    if mooncake.exists():
        mc = _timed("load_trace (mooncake, 12,031 rows)", load_trace, mooncake)
        _timed("summarize (mooncake, hash-id prefix reuse)", summarize, mc)
        _timed(
            "expand all mooncake prompts one by one",
            lambda: sum(len(mc.prompt_token_ids(i)) for i in range(len(mc))),
        )
    _timed("default_workload", default_workload)


if __name__ == "__main__":
    main()
