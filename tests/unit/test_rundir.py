"""sim/results/rundir.py: the results directory is checked before a run, staged beside its
target and renamed into place, never mixing two runs' files."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from sim.cli import out_dir
from sim.config import OptionError, Options
from sim.results.rundir import Staging, default_target, sticky_interrupt, target_dir


def test_default_target_falls_back_to_a_timestamp(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """results/<trace stem>; when taken, -<timestamp>, then -<timestamp>-2."""
    monkeypatch.chdir(tmp_path)
    assert default_target("a/b/code.csv.gz") == Path("results/code")
    assert default_target(None) == Path("results/default")
    (tmp_path / "results" / "code").mkdir(parents=True)
    first = default_target("code.csv", now=0.0)
    assert first.name.startswith("code-") and first.parent == Path("results")
    first.mkdir()
    second = default_target("code.csv", now=0.0)
    assert second.name == f"{first.name}-2"


def test_explicit_out_refused_when_not_empty_unless_overwrite(tmp_path: Path) -> None:
    """An empty --out is fine; a non-empty one needs --overwrite; a file is refused."""
    assert target_dir(str(tmp_path), None, False) == tmp_path
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(OptionError, match="--overwrite"):
        target_dir(str(tmp_path), None, False)
    assert target_dir(str(tmp_path), None, True) == tmp_path
    with pytest.raises(OptionError, match="not a directory"):
        target_dir(str(tmp_path / "old.txt"), None, True)
    with pytest.raises(OptionError, match="old.txt is not a directory"):
        target_dir(str(tmp_path / "old.txt" / "sub" / "out"), None, False)


def test_the_current_directory_is_refused(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """--out . (or a parent of it) would be renamed away under the running process."""
    monkeypatch.chdir(tmp_path)
    for out in (".", str(tmp_path.parent)):
        with pytest.raises(OptionError, match="current directory"):
            target_dir(out, None, True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_parent_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(OptionError, match="not writable"):
        target_dir(str(locked / "out"), None, False)


def test_commit_replaces_the_whole_directory(tmp_path: Path) -> None:
    """Files of an older run never survive a commit; nothing temporary is left beside it."""
    target = tmp_path / "run"
    target.mkdir()
    (target / "report.html").write_text("old")
    staging = Staging(target)
    path = staging.open()
    assert path.parent == tmp_path and path.name.startswith(".run.tmp-")
    (path / "summary.json").write_text("{}")
    assert staging.written()
    assert staging.commit() == target
    assert sorted(p.name for p in target.iterdir()) == ["summary.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert (target.stat().st_mode & 0o777) != 0o700


def test_discard_leaves_nothing(tmp_path: Path) -> None:
    staging = Staging(tmp_path / "deep" / "run")
    path = staging.open()
    (path / "half").write_text("x")
    staging.discard()
    assert list((tmp_path / "deep").iterdir()) == []
    assert not staging.written()


def test_default_directory_is_named_after_the_workload_source() -> None:
    """A dataset run gets results/<dataset file stem> or results/<dataset name>, not 'default'."""
    assert out_dir(Options(dataset_name="random")) == Path("results/random")
    assert out_dir(Options(dataset_name="sharegpt", dataset_path="d/ShareGPT_V3.json")) == \
        Path("results/ShareGPT_V3")
    assert out_dir(Options()) == Path("results/default")


def test_an_interrupt_dropped_in_a_finaliser_is_raised_at_the_next_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C inside a finaliser: CPython reports its KeyboardInterrupt as unraisable and goes
    on; the check raises it again. Without an interrupt the check passes, and the handler
    before is back after."""
    dropped: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))

    class Finalised:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)
    with sticky_interrupt() as check:
        check()
        Finalised()
        assert dropped == [KeyboardInterrupt]
        with pytest.raises(KeyboardInterrupt):
            check()
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt), sticky_interrupt():
        signal.raise_signal(signal.SIGINT)
