"""Tests of reports/merge.py: result directories merge only when they differ in sweep axes;
any other difference is one line naming the field, exit 2, and nothing written."""
from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reports import ReportError
from reports import schema as S
from reports.__main__ import main
from reports.merge import check_mergeable, identity, run_context
from tests.unit import reports_data


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return reports_data.rate_runs(tmp_path_factory)


def edited(source: Path, dest: Path, name: str, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of a result directory with one JSON file changed."""
    copy = Path(shutil.copytree(source, dest))
    data = json.loads((copy / name).read_text())
    change(data)
    (copy / name).write_text(json.dumps(data))
    return copy


def test_sweep_axes_may_differ(runs: list[Path]) -> None:
    """Rate scale and block size differ between the three runs: they merge."""
    check_mergeable(runs)
    first = identity(runs[0])
    assert "option rate_scale" not in first and "option block_size" not in first
    assert first["model"] == "Llama-2-7B" and first["allocator set"] == "max, paged"


@pytest.mark.parametrize(("name", "change", "field"), [
    (S.CONFIG_FILE, lambda d: d["model"].update(name="OPT-13B"), "model (Llama-2-7B vs OPT-13B)"),
    (S.CONFIG_FILE, lambda d: d["gpu"].update(name="H100-80GB"), "GPU (A100-80GB vs H100-80GB)"),
    (S.CONFIG_FILE, lambda d: d["provenance"].update(trace_sha256="ab12"), "trace"),
    (S.CONFIG_FILE, lambda d: d["options"].update(max_num_seqs=8),
     "option max_num_seqs (256 vs 8)"),
    (S.CONFIG_FILE, lambda d: d["options"].update(seed=3), "option seed (0 vs 3)"),
    (S.SUMMARY_FILE, lambda d: d["allocators"].pop("max"), "allocator set (max, paged vs paged)"),
])
def test_other_differences_are_refused(runs: list[Path], tmp_path: Path, name: str,
                                       change: Callable[[dict[str, Any]], None],
                                       field: str) -> None:
    """One stderr line naming both runs and the field, exit 2, no report written at all."""
    other = edited(runs[1], tmp_path / "other", name, change)
    with pytest.raises(ReportError, match="which is not a sweep axis"):
        check_mergeable([runs[0], other])
    err = io.StringIO()
    out = tmp_path / "reports"
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(runs[0]), str(other), "--out", str(out)])
    lines = err.getvalue().strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert f"differ in {field}" in lines[0] and str(other) in lines[0]
    assert not out.exists()


def test_output_options_do_not_matter(runs: list[Path], tmp_path: Path) -> None:
    """Where results were written (--out, --no-progress, --report) is not a difference."""
    other = edited(runs[1], tmp_path / "o", S.CONFIG_FILE,
                   lambda d: d["options"].update(out="/elsewhere", progress=True, report=True))
    check_mergeable([runs[0], other])


def test_run_context_names_trace_model_gpu() -> None:
    """The title context reads the trace file name, model and GPU (with the TP degree)."""
    config = {"provenance": {"trace_path": "../shared/traces/AzureLLMInferenceTrace_code.csv"},
              "options": {"tp": 2}, "model": {"name": "Llama-2-13B"},
              "gpu": {"name": "A100-40GB"}}
    assert run_context(config) == {"trace": "AzureLLMInferenceTrace_code.csv",
                                   "model": "Llama-2-13B", "gpu": "2 x A100-40GB"}
    assert run_context({})["trace"] == "built-in default workload"
