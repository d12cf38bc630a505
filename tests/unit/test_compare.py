"""sim/compare.py: allocators in worker processes write exactly what a serial run writes; a
broken allocator is reported while the others' results are written."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from allocator.paged import PagedKVCacheManager
from allocator.request import Request
from sim.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
FILES = ("requests.parquet", "steps.parquet", "trace_summary.json", "allocation_log.jsonl.gz")


class LeakyManager(PagedKVCacheManager):
    """A paged manager that never frees: every run of it ends with leaked blocks."""

    def free(self, request: Request) -> None:
        return None


def _run(out: Path, *extra: str) -> int:
    return main([str(DATA / "tiny_azure.csv"), "--num-gpu-blocks", "400", "--no-progress",
                 "--allocators", "paged,max,ft", "--out", str(out), *extra])


def _summary(path: Path) -> str:
    return re.sub(r'"wall_s": [0-9.e+-]+', '"wall_s": 0', (path / "summary.json").read_text())


def test_workers_write_what_a_serial_run_writes(tmp_path: Path) -> None:
    """--jobs 3 and --jobs 1: the same bytes in every file (wall times aside), log included."""
    assert _run(tmp_path / "one", "--jobs", "1", "--record-allocation-log") == 0
    assert _run(tmp_path / "three", "--jobs", "3", "--record-allocation-log") == 0
    assert _summary(tmp_path / "one") == _summary(tmp_path / "three")
    for name in FILES:
        assert (tmp_path / "one" / name).read_bytes() == \
            (tmp_path / "three" / name).read_bytes(), name
    summary = json.loads((tmp_path / "three" / "summary.json").read_text())
    assert list(summary["allocators"]) == ["paged", "max", "ft"]
    assert not [p for p in (tmp_path / "three").iterdir() if p.name.startswith(".")]


def test_a_broken_allocator_is_reported_and_the_rest_written(tmp_path: Path,
                                                            capsys: object) -> None:
    """A worker whose replay leaks: exit status 1, one error line, the others' results."""
    leaky = f"{__name__}:LeakyManager"
    code = main([str(DATA / "tiny_azure.csv"), "--num-gpu-blocks", "400", "--no-progress",
                 "--allocators", f"paged,{leaky}", "--jobs", "2", "--out", str(tmp_path)])
    assert code == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary["allocators"]) == ["paged"]
    err = capsys.readouterr().err.strip().splitlines()  # type: ignore[attr-defined]
    errors = [line for line in err if line.startswith("simulate.py: error:")]
    assert len(errors) == 1 and "leaked blocks" in errors[0] and leaky in errors[0]
    # the one other line: tiny_azure.csv's 4101-token prompt is over max_model_len
    assert [line for line in err if line not in errors] == [
        line for line in err if line.startswith("simulate.py: warning:")] and len(err) == 2


def test_an_unguarded_script_runs_once(tmp_path: Path) -> None:
    """A caller's script without ``if __name__ == "__main__"`` is not run again by the
    worker processes (a spawned worker would import it again)."""
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "print('top level', file=sys.stderr)\n"
        "from sim.cli import main\n"
        f"code = main([{str(DATA / 'tiny_azure.csv')!r}, '--num-gpu-blocks', '400',\n"
        "             '--allocators', 'paged,max', '--jobs', '2', '--no-progress',\n"
        f"             '--out', {str(tmp_path / 'out')!r}])\n"
        "print('finished', code, file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    assert done.stderr.count("top level") == 1, done.stderr
    assert "finished 0" in done.stderr
