"""Write a run's result files atomically, typed by ``sim/results/results_schema.json``.

Every file is written to a temporary file in the output directory and moved into place with
``os.replace``, so an interrupted or failed run never leaves a half-written file and results
already there stay intact. Parquet column types come from the schema file, the single
description of the outputs that ``reports/`` and ``kernels/`` read.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

SCHEMA_PATH = Path(__file__).with_name("results_schema.json")
_ARROW_TYPES = {"int64": pa.int64(), "float64": pa.float64(), "string": pa.string(),
                "bool": pa.bool_()}


def load_schema() -> dict[str, Any]:
    """The results schema (sim/results/results_schema.json)."""
    with SCHEMA_PATH.open(encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return schema


SCHEMA = load_schema()
SCHEMA_VERSION: int = SCHEMA["schema_version"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def replace_into(tmp: str, path: Path) -> None:
    """Give a finished temporary file normal permissions and move it over ``path``."""
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        replace_into(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Pretty JSON with a trailing newline; key order as given."""
    atomic_write(path, (json.dumps(obj, indent=2, allow_nan=False) + "\n").encode())


def typed_table(name: str, columns: dict[str, list[Any]]) -> pa.Table:
    """The columns as an Arrow table with the columns, types and metadata the schema lists
    for the file ``name``."""
    spec = SCHEMA["files"][name]["columns"]
    missing = set(spec) ^ set(columns)
    if missing:
        raise ValueError(f"{name}: columns differ from the schema: {sorted(missing)}")
    fields = [pa.field(col, _ARROW_TYPES[spec[col]["type"]], nullable=True) for col in spec]
    meta = {b"schema_version": str(SCHEMA_VERSION).encode(), b"file": name.encode()}
    return pa.table([pa.array(columns[col], type=f.type) for col, f in zip(spec, fields)],
                    schema=pa.schema(fields, metadata=meta))


def write_tables(path: Path, name: str, parts: list[pa.Table]) -> None:
    """One parquet file of the typed tables ``parts`` (from ``typed_table``), in order."""
    table = (pa.concat_tables(parts).combine_chunks() if parts else
             typed_table(name, {col: [] for col in SCHEMA["files"][name]["columns"]}))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        replace_into(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def provenance(seed: int, trace_path: str | None, trace_sha256: str | None) -> dict[str, Any]:
    """pagedsim version, git commit (if any), Python, seed, trace path and sha256, command."""
    root = Path(__file__).resolve().parents[2]
    return {
        "pagedsim_version": pagedsim_version(),
        "git_commit": _git(root, "rev-parse", "HEAD"),
        "git_dirty": None if _git(root, "rev-parse", "HEAD") is None
        else bool(_git(root, "status", "--porcelain")),
        "python": sys.version.split()[0],
        "seed": seed,
        "trace_path": trace_path,
        "trace_sha256": trace_sha256,
        "command": sys.argv,
    }


def pagedsim_version() -> str:
    """The installed package version, or pyproject's when running from a checkout."""
    try:
        return metadata.version("pagedsim")
    except metadata.PackageNotFoundError:
        return "0.1.0+checkout"


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()
