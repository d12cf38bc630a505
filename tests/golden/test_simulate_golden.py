"""simulate.py on tiny traces: summaries match the checked-in golden files, runs repeat
byte for byte, and the fast path writes the same files as the reference loop.

Regenerate the golden files after an intended change with
``PAGEDSIM_UPDATE_GOLDEN=1 python -m pytest tests/golden/test_simulate_golden.py``.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sim.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
GOLDEN = Path(__file__).resolve().parent
SYNC = ["--no-async-scheduling"]
# The first wave's step times: the plain roofline (its 2 ms + 10 us per sequence, serial).
V014 = ["--vllm-version", "0.14", *SYNC, "--step-model", "roofline"]
BASE: dict[str, list[str]] = {
    "tiny_azure": [str(DATA / "tiny_azure.csv"), "--num-gpu-blocks", "400"],
    "tiny_mooncake_n2": [str(DATA / "tiny_mooncake.jsonl"), "--num-gpu-blocks", "300",
                         "--n", "2", "--allocators", "paged,paged-nocache,pow2"],
    "default_swap": ["--limit", "40", "--num-gpu-blocks", "120", "--preemption", "swap",
                     "--allocators", "paged,oracle", "--placement", "first-fit"],
}
# The first wave's scenarios under 0.14 (bytes kept), the same under 0.33 without async
# scheduling (LIFO free order, admission gate, ...; the engine alone, without the API path),
# and runs at the full 0.33 defaults (API path included).
CASES: dict[str, list[str]] = {name: [*args, *V014] for name, args in BASE.items()}
CASES.update({f"{name}_v033": [*args, *SYNC, "--no-api-overhead"]
              for name, args in BASE.items()})
CASES["tiny_azure_default"] = BASE["tiny_azure"]
CASES["tiny_azure_async_eagle"] = [str(DATA / "tiny_azure.csv"), "--num-gpu-blocks", "160",
                                   "--allocators", "paged", "--speculative-config",
                                   '{"method": "eagle", "num_speculative_tokens": 3}']
SHORTCUT_CASES = {
    "sync": SYNC,
    "async": ["--async-scheduling"],
    "ngram": [*SYNC, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}'],
    "eagle_async": ["--speculative-config", '{"method": "eagle", "num_speculative_tokens": 2}',
                    "--acceptance-rate", "0.9,0.5"],
}
"""Fast path vs --no-fast: the sync and async runs take the fast path (the async one without
coasting); spec decoding falls back to the reference loop in both (``uses_fast_path``), with
the same files."""
PATH_COUNTERS = ("fast_path", "num_coasted_steps", "num_coasted_finishing_steps")
"""Counters that say which path ran, not what was simulated."""


def _simulate(out: Path, args: list[str]) -> dict[str, Any]:
    code = main([*args, "--out", str(out), "--no-progress"])
    assert code == 0
    with (out / "summary.json").open() as fh:
        summary: dict[str, Any] = json.load(fh)
    return summary


def _strip(summary: dict[str, Any]) -> dict[str, Any]:
    # vllm bench serve's names for the same results; test_bench_metrics_match_golden checks
    # them against the golden values.
    summary.pop("bench")
    for entry in summary["allocators"].values():
        entry.pop("wall_s")
    summary["trace"].pop("path")
    # "0.1.0" when installed, "0.1.0+checkout" when run from a source tree: not a result.
    summary.pop("pagedsim_version")
    return summary


def _close(actual: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected)
        for key in expected:
            _close(actual[key], expected[key])
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-9, abs=1e-12)
    else:
        assert actual == expected


@pytest.mark.parametrize("case", sorted(CASES))
def test_summary_matches_golden(case: str, tmp_path: Path) -> None:
    """Every allocator's summary equals the checked-in one (floats to 1e-9)."""
    summary = _strip(_simulate(tmp_path, CASES[case]))
    golden = GOLDEN / f"simulate_{case}.json"
    if os.environ.get("PAGEDSIM_UPDATE_GOLDEN"):
        golden.write_text(json.dumps(summary, indent=2) + "\n")
    _close(summary, json.loads(golden.read_text()))
    for entry in summary["allocators"].values():
        assert entry["leaked_blocks"] == 0


BENCH_OF_GOLDEN = {"mean_ttft_ms": "ttft_mean_s", "median_ttft_ms": "ttft_p50_s",
                   "p99_ttft_ms": "ttft_p99_s", "mean_tpot_ms": "tpot_mean_s",
                   "p99_tpot_ms": "tpot_p99_s", "mean_e2el_ms": "e2el_mean_s",
                   "p99_e2el_ms": "e2el_p99_s"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bench_metrics_match_golden(case: str, tmp_path: Path) -> None:
    """summary.json's vLLM-named metrics are the golden summaries' values in ms (and the
    throughputs and counts the same), for every allocator."""
    bench = _simulate(tmp_path, CASES[case])["bench"]["allocators"]
    golden = json.loads((GOLDEN / f"simulate_{case}.json").read_text())["allocators"]
    assert sorted(bench) == sorted(golden)
    for name, entry in golden.items():
        ours = bench[name]
        assert ours["completed"] == entry["num_finished"]
        assert ours["request_throughput"] == pytest.approx(entry["throughput_req_s"])
        assert ours["output_throughput"] == pytest.approx(entry["throughput_tok_s"])
        for key, seconds in BENCH_OF_GOLDEN.items():
            assert ours[key] == pytest.approx(entry[seconds] * 1000.0, rel=1e-9), key
        assert ours["p99_itl_ms"] >= ours["median_itl_ms"] > 0


def test_same_inputs_give_byte_identical_outputs(tmp_path: Path) -> None:
    """Two runs: summary.json identical except wall_s; the parquet files identical."""
    args = CASES["tiny_mooncake_n2"]
    _simulate(tmp_path / "a", args)
    _simulate(tmp_path / "b", args)
    wall = re.compile(r'"wall_s": [0-9.e+-]+')
    texts = [wall.sub('"wall_s": 0', (tmp_path / d / "summary.json").read_text())
             for d in ("a", "b")]
    assert texts[0] == texts[1]
    for name in ("requests.parquet", "steps.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("case", sorted(SHORTCUT_CASES))
def test_shortcut_gives_byte_identical_files(case: str, tmp_path: Path) -> None:
    """The fast path and --no-fast write the same requests, steps (memory series included),
    trace summary and summaries (counters naming the path aside)."""
    args = [str(DATA / "tiny_azure.csv"), "--num-gpu-blocks", "160", "--allocators",
            "paged,paged-nocache,max", *SHORTCUT_CASES[case]]
    fast = _strip(_simulate(tmp_path / "fast", args))
    ref = _strip(_simulate(tmp_path / "ref", [*args, "--no-fast"]))
    for name in ("paged", "paged-nocache", "max"):
        assert fast["counters"][name]["fast_path"] == (case in ("sync", "async"))
        assert not ref["counters"][name]["fast_path"]
    assert fast["allocators"] == ref["allocators"]
    assert [{k: v for k, v in entry.items() if k not in PATH_COUNTERS}
            for entry in fast["counters"].values()] == \
        [{k: v for k, v in entry.items() if k not in PATH_COUNTERS}
         for entry in ref["counters"].values()]
    for name in ("requests.parquet", "steps.parquet", "trace_summary.json"):
        assert (tmp_path / "fast" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()


def test_output_files_follow_the_schema(tmp_path: Path) -> None:
    """Every file exists, carries schema_version, and parquet columns are the schema's."""
    _simulate(tmp_path, CASES["default_swap"])
    schema = json.loads((ROOT / "sim" / "results" / "results_schema.json").read_text())
    for name in ("summary.json", "config.json", "trace_summary.json"):
        data = json.loads((tmp_path / name).read_text())
        assert data["schema_version"] == schema["schema_version"]
    for name in ("requests.parquet", "steps.parquet"):
        table = pq.read_table(tmp_path / name)
        assert table.column_names == list(schema["files"][name]["columns"])
        assert table.schema.metadata[b"schema_version"] == str(schema["schema_version"]).encode()
    summary = json.loads((tmp_path / "summary.json").read_text())
    keys = list(schema["files"]["summary.json"]["keys"])
    assert all(list(entry) == keys for entry in summary["allocators"].values())
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["provenance"]["seed"] == 0 and "git_commit" in config["provenance"]
