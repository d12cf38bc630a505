"""Compare the result files of two simulate.py runs: are the outputs identical?

A refactor of the simulator must not change its results. This compares two result
directories file by file: ``summary.json`` without ``wall_s`` (and without the counters
named by ``--ignore-counter``), ``config.json`` without its provenance (and without the
options named by ``--ignore-option``), ``trace_summary.json``, ``requests.parquet`` and
``steps.parquet`` (byte for byte, else table by table) and the decompressed
``allocation_log.jsonl.gz`` when either run has one. Prints one line per file; exit status 0
when everything matches, 1 otherwise.

    python benchmarks/compare_outputs.py OLD_DIR NEW_DIR [--ignore-counter NAME ...]
                                         [--ignore-option NAME ...]
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

TABLES = ("requests.parquet", "steps.parquet")
LOG = "allocation_log.jsonl.gz"


def summary_text(path: Path, ignored: set[str]) -> str:
    """summary.json as canonical text, without wall times and the ignored counters."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    for entry in data.get("allocators", {}).values():
        entry.pop("wall_s", None)
    for entry in data.get("counters", {}).values():
        for name in ignored:
            entry.pop(name, None)
    return json.dumps(data, indent=1, sort_keys=True)


def config_text(path: Path, ignored: set[str]) -> str:
    """config.json as canonical text, without provenance and the ignored options."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    data.pop("provenance", None)
    for name in ignored:
        data.get("options", {}).pop(name, None)
    return json.dumps(data, indent=1, sort_keys=True)


def same_table(old: Path, new: Path) -> str | None:
    """None when the parquet files hold the same table; else what differs."""
    if old.read_bytes() == new.read_bytes():
        return None
    a, b = pq.read_table(old), pq.read_table(new)
    if a.column_names != b.column_names:
        return f"columns {a.column_names} != {b.column_names}"
    for name in a.column_names:
        if not a.column(name).equals(b.column(name)):
            return f"column {name} differs"
    return None if a.schema.metadata == b.schema.metadata else "metadata differs"


def compare(old: Path, new: Path, counters: set[str],
            options: set[str]) -> list[tuple[str, str | None]]:
    """(file, None or the difference) for every compared file."""
    texts = {"summary.json": lambda p: summary_text(p, counters),
             "config.json": lambda p: config_text(p, options),
             "trace_summary.json": lambda p: p.read_text(encoding="utf-8")}
    results: list[tuple[str, str | None]] = []
    for name, text in texts.items():
        same = text(old / name) == text(new / name)
        results.append((name, None if same else "content differs"))
    for name in TABLES:
        results.append((name, same_table(old / name, new / name)))
    if (old / LOG).exists() or (new / LOG).exists():
        if not ((old / LOG).exists() and (new / LOG).exists()):
            results.append((LOG, "present in one run only"))
        else:
            same = gzip.decompress((old / LOG).read_bytes()) == \
                gzip.decompress((new / LOG).read_bytes())
            results.append((LOG, None if same else "content differs"))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--ignore-counter", action="append", default=[],
                        help="a counters key to leave out of the summary comparison")
    parser.add_argument("--ignore-option", action="append", default=[],
                        help="an option to leave out of the config.json comparison")
    args = parser.parse_args()
    results = compare(args.old, args.new, set(args.ignore_counter), set(args.ignore_option))
    for name, problem in results:
        print(f"{name}: {'identical' if problem is None else 'DIFFERENT (' + problem + ')'}")
    return 0 if all(problem is None for _, problem in results) else 1


if __name__ == "__main__":
    sys.exit(main())
