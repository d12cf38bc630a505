"""sim/conventions.py and the vLLM spellings of simulate.py: --help's defaults, the engine
flag aliases, the workload options of traces/options.py, and their one-line refusals."""
from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sim.cli import main, parse_options
from sim.cli_args import build_parser
from sim.config import Options
from traces.cli import option_names

ROOT = Path(__file__).resolve().parents[2]
AZURE = ROOT / "tests" / "data" / "tiny_azure.csv"
FLAG = re.compile(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def _help_entries() -> dict[str, str]:
    """--help's text of each option (first option string -> its wrapped help, joined)."""
    text = build_parser().format_help()
    entries: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"^  (-[-\w]+)", line)
        if match:
            current = match.group(1)
            entries[current] = line
        elif current is not None and line.startswith("     "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


def test_help_gives_each_default_once_and_right() -> None:
    """Every "(default: X)" in --help appears once per option and is the parser's default;
    switches (--no-fast, --debug, ...) show none."""
    parser = build_parser()
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    entries = _help_entries()
    assert len(entries) > 60
    for first, text in entries.items():
        action = actions[first]
        assert text.count("(default") <= 1, text
        shown = re.search(r"\(default: ([^)]*)\)", text)
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            assert shown is None, text
        elif shown is not None and action.default is not None:  # None: said in words
            assert " ".join(str(action.default).split()) == shown.group(1).replace("- ", "-"), \
                text
    assert "(default: True)" in entries["--prefix-caching"]
    assert "(default: 16)" in entries["--block-size"]


@pytest.mark.parametrize("argv, field, value", [
    (["--tensor-parallel-size", "2"], "tp", 2),
    (["--no-enable-prefix-caching"], "prefix_caching", False),
    (["--enable-prefix-caching"], "prefix_caching", True),
    (["--no-enable-chunked-prefill"], "chunked_prefill", False),
    (["--num-gpu-blocks-override", "77"], "num_gpu_blocks", 77),
    (["--prefix-caching-hash-algo", "xxhash_cbor"], "block_hash", "xxhash_cbor"),
    (["--block-hash", "sha256"], "block_hash", "sha256"),
    (["--request-rate", "inf"], "request_rate", float("inf")),
    (["--columns", "arrival=t,prompt_len=p"], "columns", {"arrival": "t", "prompt_len": "p"}),
    (["--goodput", "ttft:500", "tpot:50"], "goodput", ("ttft:500", "tpot:50")),
])
def test_vllm_spellings_set_the_option(argv: list[str], field: str, value: Any) -> None:
    """Each vLLM spelling lands in the same Options field as pagedsim's own."""
    assert getattr(parse_options(argv), field) == value


def _run(tmp_path: Path, *argv: str) -> dict[str, Any]:
    code = main([*argv, "--out", str(tmp_path / "out"), "--no-progress", "--jobs", "1",
                 "--allocators", "paged"])
    assert code == 0
    summary: dict[str, Any] = json.loads((tmp_path / "out" / "summary.json").read_text())
    return summary


def test_random_dataset_at_a_request_rate(tmp_path: Path) -> None:
    """--dataset-name random with --num-prompts and --request-rate: that many requests of
    those lengths, spread over about N / rate seconds."""
    summary = _run(tmp_path, "--dataset-name", "random", "--num-prompts", "40",
                   "--random-input-len", "100", "--random-output-len", "8",
                   "--request-rate", "20", "--num-gpu-blocks", "200")
    paged = summary["bench"]["allocators"]["paged"]
    assert summary["trace"]["num_requests"] == 40 and paged["completed"] == 40
    assert paged["total_input_tokens"] == 40 * 100 and paged["total_output_tokens"] == 40 * 8
    assert summary["bench"]["dataset_name"] == "random"
    assert summary["bench"]["request_rate"] == 20
    assert 1.5 < paged["duration"] < 3.0


def test_num_prompts_on_a_trace_and_request_rate_inf(tmp_path: Path) -> None:
    """--num-prompts on a trace takes its first N; --request-rate inf sends them all at 0."""
    summary = _run(tmp_path, str(AZURE), "--num-prompts", "5", "--request-rate", "inf",
                   "--num-gpu-blocks", "400")
    assert summary["trace"]["num_requests"] == 5
    assert summary["bench"]["request_rate"] == "inf"
    arrivals = pq.read_table(tmp_path / "out" / "requests.parquet")["arrival_s"].to_pylist()
    assert arrivals == [0.0] * 5


def _sharegpt(tmp_path: Path) -> Path:
    records = [{"id": f"c{i}", "conversations": [
        {"from": "human", "value": "the cat sat on the mat " * (3 + i)},
        {"from": "gpt", "value": "a dog ran far " * 4}]} for i in range(6)]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(records))
    return path


def test_sharegpt_estimate_is_flagged_and_tokenizer_counts(tmp_path: Path) -> None:
    """ShareGPT without --tokenizer: character estimate, flagged in summary.json; with a
    local tokenizer.json: its word counts (6 words a repeat, plus the repeats)."""
    path = _sharegpt(tmp_path)
    est = _run(tmp_path / "a", "--dataset-name", "sharegpt", "--dataset-path", str(path),
               "--num-prompts", "4", "--num-gpu-blocks", "200")
    assert est["bench"]["tokens_estimated"] is True
    pytest.importorskip("tokenizers")  # optional extra
    from tests.unit.tokenizer_kit import word_level
    tok = word_level(tmp_path / "tok")
    real = _run(tmp_path / "b", "--dataset-name", "sharegpt", "--dataset-path", str(path),
                "--num-prompts", "4", "--tokenizer", str(tok), "--num-gpu-blocks", "200")
    assert real["bench"]["tokens_estimated"] is False
    assert real["bench"]["allocators"]["paged"]["total_output_tokens"] == 4 * 16


@pytest.mark.parametrize("argv, fragment", [
    (["--format", "azure"], "--format"),
    ([str(AZURE), "--request-rate", "3", "--rate-scale", "2"], "--rate-scale"),
    ([str(AZURE), "--num-prompts", "3", "--limit", "3"], "--limit"),
    (["--dataset-name", "sharegpt"], "--dataset-path"),
    (["--burstiness", "0.5"], "--request-rate"),
    (["--request-rate", "0"], "--request-rate"),
    (["--columns", "oops"], "--columns"),
    (["--time-unit", "weeks"], "--time-unit"),
    (["--max-concurrency", "0"], "--max-concurrency"),
    (["--goodput", "ttft"], "--goodput"),
    (["--goodput", "itl:5"], "--goodput"),
    (["--percentile-metrics", "ttft,p50"], "--percentile-metrics"),
    (["--metric-percentiles", "101"], "--metric-percentiles"),
    (["--prefix-caching-hash-algo", "md5"], "--prefix-caching-hash-algo"),
    (["--list", "kernels"], "--list"),
    (["--json", "."], "--json"),
    (["--json", str(AZURE / "sub" / "b.json")], "--json"),
    (["--tokenizer", "/no/such/tokenizer.json", "--dataset-name", "random"], "tokenizer"),
])
def test_bad_convention_input_is_one_line_status_2(argv: list[str], fragment: str,
                                                   capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    """Refused: exit 2, one stderr line naming the option, nothing written."""
    try:
        code = main([*argv, "--no-progress", "--out", str(tmp_path / "out")])
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and fragment in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def _message_flags(files: list[Path]) -> set[str]:
    """Every --option named in a string inside a ``raise`` in ``files``."""
    found: set[str] = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Raise):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        found.update(FLAG.findall(sub.value))
    return found


def test_loader_messages_name_options_that_exist() -> None:
    """The options the trace loader's errors suggest are options of simulate.py and of
    python -m traces."""
    flags = _message_flags(sorted((ROOT / "traces").glob("*.py")))
    assert {"--sort", "--columns", "--format", "--request-rate"} <= flags
    ours = {s for a in build_parser()._actions for s in a.option_strings}
    assert flags <= ours, flags - ours
    assert flags <= option_names(), flags - option_names()


def test_simulator_messages_name_options_that_exist() -> None:
    """So do the simulator's own errors (the sweep's name the sweep's options)."""
    files = [f for f in sorted((ROOT / "sim").rglob("*.py")) if "sweep" not in f.parts]
    flags = _message_flags(files)
    assert {"--num-gpu-blocks", "--goodput", "--metric-percentiles"} <= flags
    ours = {s for a in build_parser()._actions for s in a.option_strings}
    assert flags <= ours, flags - ours


def test_options_has_a_field_for_every_option() -> None:
    """Every parsed option reaches Options (none is silently dropped)."""
    dests = {a.dest for a in build_parser()._actions if a.dest != "help"}
    assert dests <= set(Options.__dataclass_fields__)


def test_generic_csv_with_columns_time_unit_and_sort(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """--format csv --columns maps a CSV's own column names, --time-unit ms reads its times,
    --sort accepts rows out of order (refused without it, naming --sort)."""
    path = tmp_path / "mine.csv"
    path.write_text("t,p,o\n0,30,4\n500,20,3\n250,10,2\n")
    argv = [str(path), "--format", "csv", "--columns", "arrival=t,prompt_len=p,output_len=o",
            "--time-unit", "ms", "--num-gpu-blocks", "64"]
    assert main([*argv, "--out", str(tmp_path / "unsorted"), "--no-progress"]) == 2
    assert "--sort" in capsys.readouterr().err
    summary = _run(tmp_path, *argv, "--sort")
    assert summary["trace"]["num_requests"] == 3
    table = pq.read_table(tmp_path / "out" / "requests.parquet").to_pydict()
    assert table["arrival_s"] == [0.0, 0.25, 0.5]
    assert table["prompt_tokens"] == [30, 10, 20]
