"""Load one result directory into plain tables, refusing bad files with one clear line.

``load_run(dir)`` reads the five files ``simulate.py`` writes, checks each one's
``schema_version`` and the keys and columns the plots need, and returns a ``RunResults``:
the per-allocator summary, the configuration, the trace summary, and the step and request
tables (only the columns reports/ uses, so a long run stays small in memory).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from reports import schema as S
from reports.errors import ReportError


@dataclass(slots=True)
class RunResults:
    """One simulator run: every allocator's summary, steps and requests."""

    path: Path
    summary: dict[str, dict[str, Any]]
    counters: dict[str, dict[str, Any]]
    info: dict[str, Any]
    config: dict[str, Any]
    trace_summary: dict[str, Any]
    steps: pd.DataFrame
    requests: pd.DataFrame
    _by_name: dict[tuple[str, str], pd.DataFrame] = field(default_factory=dict, repr=False)

    @property
    def allocators(self) -> list[str]:
        """Allocator names in the order the summary lists them."""
        return list(self.summary)

    def steps_of(self, name: str) -> pd.DataFrame:
        """The steps of one allocator, in time order."""
        return self._select("steps", self.steps, name)

    def requests_of(self, name: str) -> pd.DataFrame:
        """The requests of one allocator."""
        return self._select("requests", self.requests, name)

    def _select(self, kind: str, table: pd.DataFrame, name: str) -> pd.DataFrame:
        key = (kind, name)
        if key not in self._by_name:
            self._by_name[key] = table[table[S.ALLOCATOR] == name]
        return self._by_name[key]

    def capacity(self, name: str) -> int:
        """KV capacity in token slots: the memory categories of any step add up to it."""
        steps = self.steps_of(name)
        if not len(steps):
            return 0
        return int(sum(int(steps[col].iloc[0]) for col, _ in S.MEMORY_CATEGORIES))

    def time_span(self) -> tuple[float, float]:
        """(first step start, last step end) over every allocator; (0, 1) without steps."""
        if not len(self.steps):
            return 0.0, 1.0
        start = float(self.steps[S.TIME].min())
        end = float((self.steps[S.TIME] + self.steps[S.DURATION]).max())
        return start, max(end, start + 1e-9)

    def caching(self, name: str) -> bool:
        """Whether prefix caching was on (the summary gives a hit rate only then)."""
        return self.summary[name].get("prefix_hit_rate") is not None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object with a supported schema_version.

    Raises:
        ReportError: missing, unreadable, not an object, or without a known schema_version.
    """
    if not path.is_file():
        raise ReportError(f"{path}: file not found (is this a simulate.py result directory?)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: expected a JSON object, got {type(data).__name__}")
    S.check_version(data, path)
    return data


def read_table(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """The named columns of a Parquet file with a supported schema_version.

    The version is read from the file's key-value metadata, or from a ``schema_version``
    column when the writer stored it that way.

    Raises:
        ReportError: missing or unreadable file, unknown version, or a missing column.
    """
    if not path.is_file():
        raise ReportError(f"{path}: file not found (is this a simulate.py result directory?)")
    try:
        file_schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise ReportError(f"{path}: not a readable Parquet file: {exc}") from None
    _check_table_version(file_schema, path)
    missing = [c for c in columns if c not in file_schema.names]
    if missing:
        raise ReportError(f"{path}: missing column(s) {', '.join(missing)}")
    try:
        return pq.read_table(path, columns=list(columns)).to_pandas()
    except (OSError, pa.ArrowException) as exc:
        raise ReportError(f"{path}: cannot read columns: {exc}") from None


def _check_table_version(file_schema: pa.Schema, path: Path) -> None:
    meta = file_schema.metadata or {}
    raw = meta.get(S.VERSION_KEY.encode())
    if raw is not None:
        try:
            version: Any = json.loads(raw.decode())
        except (UnicodeDecodeError, json.JSONDecodeError):
            version = raw.decode(errors="replace")
        S.check_version({S.VERSION_KEY: version}, path)
        return
    if S.VERSION_KEY in file_schema.names:
        values = pq.read_table(path, columns=[S.VERSION_KEY]).column(0).unique().to_pylist()
        for version in values or [None]:
            S.check_version({S.VERSION_KEY: version}, path)
        return
    S.check_version({}, path)


def load_run(result_dir: Path) -> RunResults:
    """Read a result directory written by ``simulate.py``.

    Raises:
        ReportError: the directory or one of its files is missing or malformed.
    """
    result_dir = Path(result_dir)
    if not result_dir.is_dir():
        raise ReportError(f"{result_dir}: not a directory")
    summary_path = result_dir / S.SUMMARY_FILE
    top = read_json(summary_path)
    summary = _allocator_summaries(top, summary_path)
    counters = top.get(S.COUNTERS_KEY) or {}
    if not isinstance(counters, dict):
        raise ReportError(f"{summary_path}: {S.COUNTERS_KEY!r} must be an object")
    info = {k: v for k, v in top.items() if k not in (S.ALLOCATORS_KEY, S.COUNTERS_KEY)}
    config = read_json(result_dir / S.CONFIG_FILE)
    trace_summary = read_json(result_dir / S.TRACE_SUMMARY_FILE)
    steps = read_table(result_dir / S.STEPS_FILE, (S.ALLOCATOR, *S.STEP_COLUMNS))
    requests = read_table(result_dir / S.REQUESTS_FILE, (S.ALLOCATOR, *S.REQUEST_COLUMNS))
    steps = steps.sort_values([S.ALLOCATOR, S.TIME], kind="stable").reset_index(drop=True)
    for name, table, path in ((S.STEPS_FILE, steps, result_dir / S.STEPS_FILE),
                              (S.REQUESTS_FILE, requests, result_dir / S.REQUESTS_FILE)):
        unknown = sorted(set(table[S.ALLOCATOR].unique()) - set(summary))
        if unknown:
            raise ReportError(f"{path}: allocator(s) {', '.join(map(str, unknown))} are not in "
                              f"{S.SUMMARY_FILE}")
    return RunResults(result_dir, summary, counters, info, config, trace_summary, steps,
                      requests)


def _allocator_summaries(data: dict[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    entries = data.get(S.ALLOCATORS_KEY)
    if not isinstance(entries, dict) or not entries:
        raise ReportError(f"{path}: {S.ALLOCATORS_KEY!r} must be a non-empty object "
                          "(one entry per allocator)")
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise ReportError(f"{path}: allocators.{name} is not an object")
        missing = [key for key in S.SUMMARY_KEYS if key not in entry]
        if missing:
            raise ReportError(f"{path}: allocators.{name} lacks {', '.join(missing)}")
    return entries
