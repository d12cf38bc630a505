"""Unit tests for traces.cli and traces.fetch: summary output, exit status 2 on bad
input, and downloads checked against sha256 from a loopback HTTP server."""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from traces import TraceError
from traces.cli import main
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
