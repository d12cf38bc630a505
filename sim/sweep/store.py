"""Cell directories on disk: atomic commits, finished markers, resume.

A cell runs in a temporary directory beside its final one (``.tmp-NAME-XXXX``) and is moved
into place with one rename once it holds its marker: ``cell.json`` for a finished cell,
``error.json`` for a failed one. A cell counts as finished only when its ``cell.json``
records the same options as the cell about to run, so re-running a sweep skips exactly the
work already done; failed cells are run again. Leftover temporary directories (from a
killed run) are removed when the next sweep starts on the same directory.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
CELL_FILE = "cell.json"
ERROR_FILE = "error.json"
TMP_PREFIX = ".tmp-"


def canonical(obj: Any) -> str:
    """JSON text with sorted keys, for comparing options read back from disk."""
    return json.dumps(obj, sort_keys=True, default=str)


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Pretty JSON written through a temporary file and os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(obj, indent=2, default=str) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_record(root: Path, name: str) -> dict[str, Any] | None:
    """The marker of a cell directory (cell.json, else error.json), or None."""
    for marker in (CELL_FILE, ERROR_FILE):
        path = root / name / marker
        try:
            with path.open(encoding="utf-8") as fh:
                record: dict[str, Any] = json.load(fh)
        except (OSError, ValueError):
            continue
        return record
    return None


def finished(root: Path, name: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """The record of a finished cell run with exactly ``options``, or None (run it)."""
    record = read_record(root, name)
    if record is None or record.get("status") != "ok":
        return None
    if canonical(record.get("options")) != canonical(options):
        return None
    return record


def make_temp(root: Path, name: str) -> Path:
    """A fresh temporary directory beside the cell's final directory."""
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name[:80]}-", dir=root))


def commit(root: Path, name: str, tmp: Path) -> Path:
    """Move ``tmp`` to ``root/name``, replacing an older result of that cell.

    A directory cannot be renamed over a non-empty one, so an old result is first renamed
    aside (to a temporary name) and deleted after; a crash in between leaves no final
    directory, so the cell simply runs again.
    """
    final = root / name
    old = None
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}old-", dir=root))
        os.replace(final, old / name)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save_record(root: Path, record: dict[str, Any]) -> None:
    """Write a record the driver received but cannot see on disk (a worker on another node
    without a shared filesystem, or a task that died before writing one). Records carry a
    ``run_id``; a marker on disk with the same id is the worker's own and is left alone."""
    name = record["name"]
    existing = read_record(root, name)
    if existing is not None and existing.get("run_id") == record.get("run_id"):
        return
    tmp = make_temp(root, name)
    write_json(tmp / (CELL_FILE if record.get("status") == "ok" else ERROR_FILE), record)
    commit(root, name, tmp)


def clean_temp(root: Path) -> int:
    """Remove leftover temporary directories; returns how many."""
    if not root.is_dir():
        return 0
    count = 0
    for entry in root.iterdir():
        if entry.name.startswith(TMP_PREFIX) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            count += 1
    return count
