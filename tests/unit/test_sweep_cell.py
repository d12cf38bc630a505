"""One sweep cell: values to options, the trace cache, running and recording (sim/sweep/cell.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.cli import parse_options
from sim.config import OptionError
from sim.sweep.cell import (
    CellTask,
    TraceCache,
    cell_options,
    execute_cell,
    option_value,
    run_cell,
)
from sim.sweep.store import CELL_FILE, ERROR_FILE

TRACE = "Timestamp,Request tokens,Response tokens\n0,100,20\n0.5,60,10\n1.0,80,15\n"


def fake_ok(options: dict[str, Any], out_dir: Path, cache: TraceCache) -> dict[str, Any]:
    print("simulated")
    return {"allocators": {"paged": {"x": options["x"] * 2}}}


def fake_raise(options: dict[str, Any], out_dir: Path, cache: TraceCache) -> dict[str, Any]:
    raise ValueError("no good")


def fake_exit(options: dict[str, Any], out_dir: Path, cache: TraceCache) -> dict[str, Any]:
    import sys

    print("simulate.py: error: argument --x: bad", file=sys.stderr)
    raise SystemExit(2)


def test_cell_options_read_values_as_the_command_line_does() -> None:
    """Every kind of value (lists, booleans, integral floats, strings of numbers) gives the
    options the same command line would."""
    options = cell_options({"trace": "/t.csv", "allocators": ["paged", "max"],
                            "chunked_prefill": False, "prefix_caching": True, "debug": True,
                            "fast": False, "rate_scale": 2, "block_size": 8.0,
                            "num_gpu_blocks": "300", "record_allocation_log": False}, "o")
    argv = ["/t.csv", "--allocators=paged,max", "--no-chunked-prefill", "--prefix-caching",
            "--debug", "--no-fast", "--rate-scale=2", "--block-size=8", "--num-gpu-blocks=300",
            "--out", "o", "--no-progress", "--jobs", "1"]
    assert options == parse_options(argv)
    assert isinstance(options.rate_scale, float) and options.block_size == 8


@pytest.mark.parametrize("options, key, text", [
    ({"blocksize": 8}, "blocksize", "not a simulate.py option"),
    ({"debug": 1}, "debug", "expected true or false"),
    ({"block_size": True}, "block_size", "expected a value"),
    ({"block_size": 0}, "block_size", "--block-size"),
    ({"block_size": 2.5}, "block_size", "invalid int value"),
    ({"preemption": "never"}, "preemption", "invalid choice"),
])
def test_refused_options_name_their_key(options: dict[str, Any], key: str, text: str) -> None:
    """Options simulate.py would refuse raise OptionError naming the option."""
    with pytest.raises(OptionError) as info:
        cell_options(options, "o")
    assert info.value.option == key and text in str(info.value)


def test_trace_cache_loads_each_trace_once(tmp_path: Path) -> None:
    """The cache answers repeated loads of one file (any spelling of its path) with the same
    trace, and loads again only for other arguments."""
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    cache = TraceCache()
    first = cache.load_trace(path, None, seed=0)
    again = cache.load_trace(str(path), None, seed=0)
    other = cache.load_trace(path, None, seed=1)
    default = cache.default_workload(3)
    assert cache.default_workload(3) is default
    assert first is again and other is not first and len(first) == 3
    assert cache.num_loads == 3


def test_execute_cell_records_success(tmp_path: Path) -> None:
    """A finished cell has cell.json with its summary and a log of the simulator's output."""
    record = execute_cell(CellTask(str(tmp_path), "x=2", {"x": 2}, {"x": 2}, fake_ok))
    assert record["status"] == "ok" and record["summary"]["allocators"]["paged"]["x"] == 4
    on_disk = json.loads((tmp_path / "x=2" / CELL_FILE).read_text())
    assert on_disk["summary"] == record["summary"] and on_disk["options"] == {"x": 2}
    assert (tmp_path / "x=2" / "cell.log").read_text() == "simulated\n"


@pytest.mark.parametrize("runner, text", [(fake_raise, "ValueError: no good"),
                                          (fake_exit, "argument --x: bad")])
def test_execute_cell_records_failure(tmp_path: Path, runner: Any, text: str) -> None:
    """A raising cell (even SystemExit) is recorded in error.json instead of propagating."""
    record = execute_cell(CellTask(str(tmp_path), "c", {}, {"x": 1}, runner))
    assert record["status"] == "failed" and text in record["error"]
    assert json.loads((tmp_path / "c" / ERROR_FILE).read_text())["error"] == record["error"]
    assert not (tmp_path / "c" / CELL_FILE).exists()


def test_run_cell_runs_the_simulator(tmp_path: Path) -> None:
    """run_cell is simulate.py with the cell's options: its summary and files are there."""
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    out = tmp_path / "out"
    summary = run_cell({"trace": str(path), "allocators": "paged,max", "rate_scale": 2.0},
                       out, TraceCache())
    assert list(summary["allocators"]) == ["paged", "max"]
    assert summary["allocators"]["paged"]["num_finished"] == 3
    assert json.loads((out / "summary.json").read_text()) == summary
    config = json.loads((out / "config.json").read_text())
    assert config["options"]["rate_scale"] == 2.0


def test_vllm_convention_options_read_from_a_spec() -> None:
    """A sweep spec can set vllm bench serve's options: --columns pairs, --goodput SLOs (a
    TOML list), an infinite --request-rate, --max-concurrency; bad pairs are refused."""
    assert option_value("columns", "arrival=t,prompt_len=p") == {"arrival": "t",
                                                                 "prompt_len": "p"}
    assert option_value("goodput", ["ttft:500", "tpot:50"]) == ("ttft:500", "tpot:50")
    assert option_value("request_rate", "inf") == float("inf")
    assert option_value("max_concurrency", 8) == 8
    with pytest.raises(OptionError, match="--columns"):
        option_value("columns", "oops")
