"""sim/cli.py: defaults in --help, one-line errors with status 2, a run that loads neither
reports nor torch."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main
from sim.cli_args import build_parser

ROOT = Path(__file__).resolve().parents[2]


def test_help_shows_every_default() -> None:
    """--help names the issue's defaults."""
    text = build_parser().format_help()
    for needle in ("llama-2-7b", "a100-80gb", "(default: 16)", "(default: 256)",
                   "(default: 8192)", "(default: recompute)", "(default: cow)",
                   "--no-chunked-prefill", "--no-prefix-caching", "--record-allocation-log"):
        assert needle in text


@pytest.mark.parametrize("argv, fragment", [
    (["/no/such/trace.csv"], "cannot read"),
    (["--allocators", "nope"], "unknown manager 'nope'"),
    (["--model", "gpt-17"], "unknown model"),
    (["--block-size", "0"], "--block-size"),
    (["--preemption", "swap", "--swap-space", "0"], "swap"),
    (["--max-model-len", "999999"], "context length"),
    (["--step-model", "poly"], "needs a file"),
])
def test_bad_input_is_one_line_and_status_2(argv: list[str], fragment: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Invalid options or unreadable input: exit 2 and one stderr line naming the problem."""
    try:
        code = main([*argv, "--no-progress"])
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and fragment in err[0]


def test_failed_run_leaves_earlier_results_intact(tmp_path: Path) -> None:
    """A run refused for bad options does not touch an existing output directory."""
    assert main(["--limit", "5", "--allocators", "paged", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    before = (tmp_path / "summary.json").read_bytes()
    assert main(["--limit", "5", "--allocators", "bad", "--out", str(tmp_path)]) == 2
    assert (tmp_path / "summary.json").read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_sim_never_imports_reports_or_torch() -> None:
    """Running the simulator loads neither reports, matplotlib nor torch."""
    code = ("import sys; from sim.cli import main; "
            "main(['--limit','2','--allocators','paged','--out','" + "/tmp/pagedsim-imports"
            + "','--no-progress']); "
            "print(sorted(m for m in ('reports','matplotlib','torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
