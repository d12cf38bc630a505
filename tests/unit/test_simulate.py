"""simulate.py, the composition point: --report and --validate call reports and kernels
(imported only then), the thin entry point prints the configuration and the table."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from simulate import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flag, module", [("--report", "reports"),
                                          ("--validate", "kernels")])
def test_report_and_validate_need_their_modules(flag: str, module: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--report / --validate import reports / kernels lazily; when missing: one error line,
    status 1, and the results are still written."""
    monkeypatch.setitem(sys.modules, module, None)
    code = main(["--limit", "3", "--allocators", "paged", "--out", str(tmp_path),
                 "--no-progress", flag])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and flag in err[0]
    assert (tmp_path / "summary.json").exists()


def test_simulate_py_runs_and_prints_config_and_table(tmp_path: Path) -> None:
    """The thin entry point: resolved configuration first, then the comparison table."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "simulate.py"), "--limit", "4", "--allocators",
         "paged,max", "--out", str(tmp_path), "--no-progress"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "pagedsim: resolved configuration"
    assert any(line.startswith("finished / rejected") for line in lines)
    assert "paged" in out.stdout and "max" in out.stdout


# --- the results directory, Ctrl-C, refusals (subprocesses: exit code, lines, tracebacks) ---

DATA = ROOT / "tests" / "data"
TINY = [str(DATA / "tiny_azure.csv"), "--num-gpu-blocks", "400", "--no-progress"]


def _simulate(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "simulate.py"), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def _refused(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    """Exit 2, one stderr line naming the problem, no traceback, nothing on stdout."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and fragment in lines[0], lines
    assert "Traceback" not in done.stderr and done.stdout == ""


def _leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(".")]


def test_out_that_is_a_file_or_below_one_is_refused_first(tmp_path: Path) -> None:
    """Refused before anything is simulated (nothing printed on stdout), file untouched."""
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    _refused(_simulate(*TINY, "--out", str(blocker)), "is not a directory")
    _refused(_simulate(*TINY, "--out", str(blocker / "run")), "is not a directory")
    assert blocker.read_text() == "keep" and _leftovers(tmp_path) == []


def test_out_not_empty_needs_overwrite_and_runs_never_mix(tmp_path: Path) -> None:
    """A non-empty --out is refused without --overwrite; with it, the old files are gone
    (no stale report.html beside the new results)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.html").write_text("an older run")
    _refused(_simulate(*TINY, "--out", str(out)), "--overwrite")
    assert (out / "report.html").read_text() == "an older run"
    done = _simulate(*TINY, "--allocators", "paged", "--out", str(out), "--overwrite")
    assert done.returncode == 0, done.stderr
    assert f"results: {out}" in done.stdout.splitlines()
    assert not (out / "report.html").exists() and (out / "summary.json").exists()
    assert _leftovers(tmp_path) == [] and _leftovers(out) == []


def test_default_directory_is_never_reused(tmp_path: Path) -> None:
    """results/<trace>, then results/<trace>-<timestamp>; stdout says which."""
    for _ in range(2):
        done = _simulate(*TINY, "--allocators", "paged", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    runs = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert len(runs) == 2 and runs[0] == "tiny_azure" and runs[1].startswith("tiny_azure-")
    assert done.stdout.splitlines()[-1] == f"results: results/{runs[1]}"


def test_every_request_rejected_writes_results_and_exits_2(tmp_path: Path) -> None:
    """--max-model-len below every prompt: results written, a warning naming the option
    that would admit them, one error line, status 2."""
    out = tmp_path / "run"
    done = _simulate(*TINY, "--allocators", "paged,max", "--max-model-len", "16",
                     "--out", str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("simulate.py: error: every allocator rejected every request")
    assert "--max-model-len 8192" in lines[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["all_rejected"] is True and summary["complete"] is True
    cause = summary["warnings"][0]
    assert cause["cause"] == "prompt_too_long" and cause["allocators"] == {"paged": 24, "max": 24}


SLOW = ["--limit", "300", "--allocators", "max,paged", "--debug", "--no-fast"]
"""max finishes in a few seconds; paged with --debug --no-fast takes about 20 more."""


def _interrupt(out: Path, jobs: str, after: str) -> subprocess.CompletedProcess[str]:
    """Run simulate.py, send SIGINT once stderr (progress on) shows ``after``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "simulate.py"), *SLOW, "--jobs", jobs,
                             "--record-allocation-log", "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = ""
    while after not in seen:
        char = proc.stderr.read(1)
        assert char, seen
        seen += char
    proc.send_signal(signal.SIGINT)
    stderr = proc.stderr.read()  # the same buffered reader: nothing read ahead is lost
    assert proc.stdout is not None
    stdout = proc.stdout.read()
    return subprocess.CompletedProcess(proc.args, proc.wait(timeout=120), stdout,
                                       seen + stderr)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_keeps_the_finished_allocators(jobs: str, tmp_path: Path) -> None:
    """Ctrl-C after max finished: exit 130, one line naming what finished and where, no
    traceback (workers too); max's results in place with "complete": false."""
    out = tmp_path / "run"
    done = _interrupt(out, jobs, "max finished")
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("simulate.py: interrupted") and "max" in last and str(out) in last
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and list(summary["allocators"]) == ["max"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["summary.json", "requests.parquet", "steps.parquet", "config.json",
         "trace_summary.json", "allocation_log.jsonl.gz"])
    assert _leftovers(tmp_path) == []


def test_ctrl_c_before_anything_finished_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _interrupt(out, "2", " 0/600")
    assert done.returncode == 130 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "simulate.py: interrupted before any allocator finished; nothing written")
    assert list(tmp_path.iterdir()) == []


def test_report_is_built_in_the_staging_directory(tmp_path: Path) -> None:
    """--report: report.html and plots/ land with the results, name the final directory, and
    nothing temporary is left."""
    out = tmp_path / "run"
    code = main([*TINY, "--allocators", "paged", "--out", str(out), "--report"])
    assert code == 0
    html = (out / "report.html").read_text()
    assert str(out.resolve()) in html and ".tmp-" not in html
    assert any((out / "plots").iterdir())
    assert _leftovers(tmp_path) == [] and _leftovers(out) == []
