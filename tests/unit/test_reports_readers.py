"""Tests of reports/readers.py and reports/schema.py against a small real simulator run."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from reports import ReportError
from reports import schema as S
from reports.readers import load_run
from tests.unit import reports_data


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reports_data.full_run(tmp_path_factory)


@pytest.fixture
def copy(run_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the run that a test may damage."""
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def test_load_run_reads_every_allocator(run_dir: Path) -> None:
    """The six built-in allocators come back with their steps, requests and capacity."""
    run = load_run(run_dir)
    assert run.allocators == ["paged", "paged-nocache", "max", "pow2", "oracle", "ft"]
    for name in run.allocators:
        assert len(run.steps_of(name)) == run.counters[name]["num_steps"]
        assert len(run.requests_of(name)) == 40
        assert run.capacity(name) == (300 - 1) * 16
    assert run.caching("paged") and not run.caching("max")
    assert run.config["scheduler"]["block_size"] == 16


def test_every_name_read_is_documented_in_the_schema() -> None:
    """Each column and summary key reports/ reads is described in sim/results/results_schema.json."""
    schema = S.load_schema()
    assert schema is not None and schema["schema_version"] in S.SUPPORTED_SCHEMA_VERSIONS
    files = schema["files"]
    assert set(S.STEP_COLUMNS) | {S.ALLOCATOR} <= set(files[S.STEPS_FILE]["columns"])
    assert set(S.REQUEST_COLUMNS) | {S.ALLOCATOR} <= set(files[S.REQUESTS_FILE]["columns"])
    assert set(S.SUMMARY_KEYS) == set(files[S.SUMMARY_FILE]["keys"])
    assert set(S.COUNTER_KEYS) <= set(files[S.SUMMARY_FILE]["counters"])


def test_missing_file_is_named(copy: Path) -> None:
    """A result directory without steps.parquet gives one error naming that file."""
    (copy / S.STEPS_FILE).unlink()
    with pytest.raises(ReportError, match=r"steps\.parquet: file not found"):
        load_run(copy)


def test_missing_directory_is_named(tmp_path: Path) -> None:
    """A directory that does not exist is named in the error."""
    with pytest.raises(ReportError, match="nowhere: not a directory"):
        load_run(tmp_path / "nowhere")


def test_malformed_json_is_named_with_its_line(copy: Path) -> None:
    """Broken JSON in config.json names the file and the line."""
    (copy / S.CONFIG_FILE).write_text('{\n  "schema_version": 1,\n  oops\n}\n', encoding="utf-8")
    with pytest.raises(ReportError, match=r"config\.json: invalid JSON at line 3"):
        load_run(copy)


def test_missing_summary_key_is_named(copy: Path) -> None:
    """A summary entry without mean_batch_size names the file, allocator and key."""
    data = json.loads((copy / S.SUMMARY_FILE).read_text(encoding="utf-8"))
    del data["allocators"]["max"]["mean_batch_size"]
    (copy / S.SUMMARY_FILE).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ReportError, match=r"summary\.json: allocators\.max lacks mean_batch_size"):
        load_run(copy)


def test_unknown_schema_version_is_refused(copy: Path) -> None:
    """A trace_summary.json of schema_version 99 is refused, naming the file."""
    data = json.loads((copy / S.TRACE_SUMMARY_FILE).read_text(encoding="utf-8"))
    data["schema_version"] = 99
    (copy / S.TRACE_SUMMARY_FILE).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ReportError, match=r"trace_summary\.json: schema_version 99"):
        load_run(copy)


def test_parquet_without_a_column_is_named(copy: Path) -> None:
    """steps.parquet lacking internal_frag names the file and the column."""
    table = pq.read_table(copy / S.STEPS_FILE)
    pq.write_table(table.drop(["internal_frag"]), copy / S.STEPS_FILE)
    with pytest.raises(ReportError, match=r"steps\.parquet: missing column\(s\) internal_frag"):
        load_run(copy)


def test_corrupt_parquet_is_named(copy: Path) -> None:
    """A requests.parquet that is not Parquet names the file."""
    (copy / S.REQUESTS_FILE).write_bytes(b"not parquet at all")
    with pytest.raises(ReportError, match=r"requests\.parquet: not a readable Parquet file"):
        load_run(copy)


def test_parquet_without_version_is_refused(copy: Path) -> None:
    """A steps.parquet whose metadata lost schema_version is refused."""
    table = pq.read_table(copy / S.STEPS_FILE)
    pq.write_table(table.replace_schema_metadata({}), copy / S.STEPS_FILE)
    with pytest.raises(ReportError, match=r"steps\.parquet: no 'schema_version'"):
        load_run(copy)
