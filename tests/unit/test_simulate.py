"""simulate.py, the composition point: --report and --validate call reports and kernels
(imported only then), the thin entry point prints the configuration and the table."""
from __future__ import annotations

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
