"""Cell directories: atomic commit, finished markers, leftovers (sim/sweep/store.py)."""
from __future__ import annotations

from pathlib import Path

from sim.sweep.store import (
    CELL_FILE,
    ERROR_FILE,
    clean_temp,
    commit,
    finished,
    make_temp,
    read_record,
    save_record,
    write_json,
)


def make_cell(root: Path, name: str, record: dict, marker: str = CELL_FILE) -> Path:
    tmp = make_temp(root, name)
    (tmp / "summary.json").write_text("{}")
    write_json(tmp / marker, record)
    return commit(root, name, tmp)


def test_commit_moves_the_temp_directory_into_place(tmp_path: Path) -> None:
    """A committed cell sits under its name and no temporary directory is left."""
    final = make_cell(tmp_path, "a=1", {"status": "ok", "options": {"a": 1}})
    assert final == tmp_path / "a=1" and (final / "summary.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["a=1"]


def test_commit_replaces_an_older_result(tmp_path: Path) -> None:
    """Committing a cell again replaces the old directory whole."""
    make_cell(tmp_path, "a=1", {"status": "failed", "options": {"a": 1}}, ERROR_FILE)
    make_cell(tmp_path, "a=1", {"status": "ok", "options": {"a": 1}})
    assert sorted(p.name for p in (tmp_path / "a=1").iterdir()) == [CELL_FILE, "summary.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["a=1"]


def test_finished_needs_ok_status_and_equal_options(tmp_path: Path) -> None:
    """Only an ok marker recorded with the same options counts as finished."""
    make_cell(tmp_path, "ok", {"status": "ok", "options": {"a": 1, "b": [1, 2]}})
    make_cell(tmp_path, "bad", {"status": "failed", "options": {"a": 1}}, ERROR_FILE)
    assert finished(tmp_path, "ok", {"b": [1, 2], "a": 1}) is not None
    assert finished(tmp_path, "ok", {"a": 2, "b": [1, 2]}) is None
    assert finished(tmp_path, "bad", {"a": 1}) is None
    assert finished(tmp_path, "absent", {}) is None
    assert read_record(tmp_path, "bad") == {"status": "failed", "options": {"a": 1}}


def test_clean_temp_removes_leftovers_only(tmp_path: Path) -> None:
    """Temporary directories of a killed run are removed; finished cells stay."""
    make_cell(tmp_path, "keep", {"status": "ok", "options": {}})
    make_temp(tmp_path, "killed")
    assert clean_temp(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["keep"]
    assert clean_temp(tmp_path / "absent") == 0


def test_save_record_writes_a_missing_marker(tmp_path: Path) -> None:
    """A record the driver cannot see on disk is written as the cell's marker."""
    record = {"name": "x=1", "run_id": "a", "status": "failed", "error": "boom", "options": {}}
    save_record(tmp_path, record)
    assert read_record(tmp_path, "x=1") == record
    mtime = (tmp_path / "x=1" / ERROR_FILE).stat().st_mtime_ns
    save_record(tmp_path, record)
    assert (tmp_path / "x=1" / ERROR_FILE).stat().st_mtime_ns == mtime
    newer = {**record, "run_id": "b", "status": "ok", "summary": {}}
    save_record(tmp_path, newer)
    assert read_record(tmp_path, "x=1") == newer
    assert not (tmp_path / "x=1" / ERROR_FILE).exists()
