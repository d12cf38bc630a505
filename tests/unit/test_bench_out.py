"""sim/results/bench_out.py: summary.json's "bench" entry and --json FILE, as documented in
sim/results/results_schema.json (keys and their mapping to pagedsim's own keys)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main
from sim.results.outputs import SCHEMA

ROOT = Path(__file__).resolve().parents[2]
AZURE = ROOT / "tests" / "data" / "tiny_azure.csv"
DOC = SCHEMA["files"]["summary.json"]["bench_keys"]


def _run(tmp_path: Path, *extra: str) -> dict[str, Any]:
    code = main([str(AZURE), "--num-gpu-blocks", "400", "--allocators", "paged,max",
                 "--out", str(tmp_path / "out"), "--no-progress", "--jobs", "1", *extra])
    assert code == 0
    summary: dict[str, Any] = json.loads((tmp_path / "out" / "summary.json").read_text())
    return summary


def test_bench_keys_are_the_documented_ones_and_map_to_ours(tmp_path: Path) -> None:
    """Default options: exactly the schema's keys; every 'same_as' holds (ms = s x 1000)."""
    summary = _run(tmp_path)
    bench = summary["bench"]
    assert set(bench) - {"about", "allocators"} == set(DOC["workload"])
    for name, entry in bench["allocators"].items():
        assert list(entry) == list(DOC["per_allocator"]), name
        ours = summary["allocators"][name]
        for key, doc in DOC["per_allocator"].items():
            if "same_as" in doc:
                scale = 1000.0 if key.endswith("_ms") else 1.0
                assert entry[key] == pytest.approx(ours[doc["same_as"]] * scale), key


def test_json_file_is_flat_per_allocator_with_the_run_settings(tmp_path: Path) -> None:
    """--json FILE: run settings at the top, one entry per allocator with p50/p90 keys."""
    path = tmp_path / "bench.json"
    summary = _run(tmp_path, "--json", str(path), "--metric-percentiles", "50,90",
                   "--goodput", "ttft:60", "--max-concurrency", "4")
    record = json.loads(path.read_text())
    assert record["backend"] == "pagedsim" and record["model_id"] == "Llama-2-7B"
    assert record["max_concurrency"] == 4 and record["num_prompts"] == 24
    assert record["allocators"] == summary["bench"]["allocators"]
    paged = record["allocators"]["paged"]
    assert "p90_ttft_ms" in paged and "p99_ttft_ms" not in paged
    assert 0 < paged["request_goodput"] < paged["request_throughput"]


def test_goodput_is_printed_per_allocator(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--goodput adds one stdout line with each allocator's goodput, as in summary.json."""
    summary = _run(tmp_path, "--goodput", "ttft:60", "e2el:1000")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    for name, entry in summary["bench"]["allocators"].items():
        assert f"{name} {entry['request_goodput']:.3f}" in line
    assert line.startswith("request goodput (req/s")
