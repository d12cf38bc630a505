"""Unit tests for traces.cli and traces.fetch: summary output, exit status 2 on bad
input, and downloads checked against sha256 from a loopback HTTP server."""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from traces import TraceError
from traces.cli import main, option_names
from traces.fetch import SOURCES, fetch

BURST = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" \
        "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A static HTTP server on 127.0.0.1 serving a fresh directory."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_summary_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`summary` prints the counts as text, or as JSON with --json."""
    path = tmp_path / "b.csv"
    path.write_text(BURST)
    assert main(["summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "num_requests: 1" in out and "num_skipped: 1" in out and "format: burstgpt" in out
    assert main(["summary", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_requests"] == 1 and data["prompt_len"]["max"] == 472


def test_summary_generic_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--columns maps a generic CSV and --sort orders its rows."""
    path = tmp_path / "g.csv"
    path.write_text("t,p,o\n5,10,2\n1,20,3\n")
    args = ["summary", str(path), "--columns", "arrival=t,prompt_len=p,output_len=o"]
    assert main(args) == 2
    assert "not sorted" in capsys.readouterr().err
    assert main(args + ["--sort", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["span_s"] == 4.0


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    """A malformed file makes the real CLI exit 2 with one error line on stderr."""
    path = tmp_path / "bad.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,x,1\n")
    proc = subprocess.run([sys.executable, "-m", "traces", "summary", str(path)],
                          check=False, capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{path}:2: field 'ContextTokens'" in lines[0]


def test_fetch_verifies_known_sum(shared_traces: Path, server: tuple[str, Path],
                                  tmp_path: Path) -> None:
    """A download whose sha256 matches the known sum is saved under the trace's name."""
    url, root = server
    shutil.copy(shared_traces / "AzureLLMInferenceTrace_code.csv", root / "code.csv")
    dest = tmp_path / "cache"
    path = fetch("azure-code", dest, f"{url}/code.csv")
    assert path == dest / "AzureLLMInferenceTrace_code.csv"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SOURCES["azure-code"].sha256
    assert fetch("azure-code", dest, f"{url}/missing.csv") == path


def test_fetch_rejects_mismatch_and_leaves_nothing(server: tuple[str, Path],
                                                   tmp_path: Path) -> None:
    """A download with the wrong sha256 is an error and no file is left behind."""
    url, root = server
    (root / "fake.csv").write_text(BURST)
    dest = tmp_path / "cache"
    with pytest.raises(TraceError, match="sha256 mismatch"):
        fetch("azure-conv", dest, f"{url}/fake.csv")
    assert list(dest.iterdir()) == []


def test_fetch_unknown_sum_warns(server: tuple[str, Path], tmp_path: Path) -> None:
    """BurstGPT has no known sum: the file is kept and a warning names the digest."""
    url, root = server
    (root / "b.csv").write_text(BURST)
    log = tmp_path / "log.txt"
    with log.open("w") as stream:
        path = fetch("burstgpt", tmp_path / "c", f"{url}/b.csv", log=stream)
    assert path.read_text() == BURST
    digest = hashlib.sha256(BURST.encode()).hexdigest()
    assert "warning: no known sha256 for burstgpt" in log.read_text() and digest in log.read_text()


def test_fetch_errors_exit_2(server: tuple[str, Path], tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    """A missing URL or a Git LFS pointer is one error line and exit status 2."""
    url, root = server
    (root / "ptr.csv").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\n")
    dest = str(tmp_path / "d")
    assert main(["fetch", "burstgpt", "--dest", dest, "--url", f"{url}/nothing.csv"]) == 2
    assert "download failed" in capsys.readouterr().err
    assert main(["fetch", "burstgpt", "--dest", dest, "--url", f"{url}/ptr.csv"]) == 2
    err = capsys.readouterr().err
    assert "Git LFS pointer" in err and len(err.strip().splitlines()) == 1


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traces", *argv], check=False,
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])


def test_every_option_named_in_traces_exists() -> None:
    """Every --option written anywhere in traces/ (messages, help) is a real option of
    `python -m traces` (so simulate.py, which reuses them, names real options too)."""
    names = option_names()
    root = Path(__file__).resolve().parents[2] / "traces"
    for path in sorted(root.glob("*.py")):
        for flag in set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", path.read_text())):
            if not flag.endswith("-"):          # "--random-*" names a family
                assert flag in names, f"{path.name} names {flag}, which does not exist"


@pytest.mark.parametrize(("files", "argv", "words"), [
    ({"m.jsonl": '{"timestamp": 0, "input_length": 1000, "output_length": 1, '
                 '"hash_ids": [1]}\n'}, ["m.jsonl"], "m.jsonl:1: field 'hash_ids'"),
    ({"a.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n"
               "2023-11-16 18:17:03.9,999999999999,10\n"}, ["a.csv"],
     "a.csv:2: field 'ContextTokens': 999999999999 is too large"),
    ({"a.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,5,1\n"
               "2023-11-16 18:17:04.9,5,1\n"}, ["a.csv", "--rate-scale", "1e-300"],
     "--rate-scale 1e-300"),
    ({}, ["--dataset-name", "random", "--request-rate", "5", "--rate-scale", "2"],
     "--request-rate and --rate-scale"),
    ({"t.jsonl": '{"input_toks": 2, "output_toks": 1, "arrival_time_ns": 0, '
                 '"priority": "high"}\n'}, ["t.jsonl"], "t.jsonl:1: field 'priority'"),
    ({}, ["--tokenizer", "nowhere/tokenizer.json", "--dataset-name", "random"],
     "--tokenizer nowhere/tokenizer.json: no such file"),
    ({}, ["--columns", "arrival"], "argument --columns: expected NAME=COL"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, files: dict[str, str],
                                          argv: list[str], words: str) -> None:
    """Each refusal: exit status 2, one stderr line with the words, no traceback, no stdout."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    args = [str(tmp_path / a) if a in files else a for a in argv]
    proc = _run("summary", *args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr


def test_cli_summarises_a_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    """`summary --dataset-name random ...` summarises the generated workload."""
    assert main(["summary", "--dataset-name", "random", "--num-prompts", "40",
                 "--random-input-len", "30", "--random-prefix-len", "32",
                 "--request-rate", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_requests"] == 40 and data["format"] == "random"
    assert data["prompt_len"]["min"] == 62 and data["span_s"] < 10.0
    assert data["prefix_reuse"]["reused_tokens"] == 39 * 32
