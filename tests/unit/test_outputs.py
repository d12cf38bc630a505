"""sim/results/outputs.py and table.py: typed tables from the schema, one file from several
parts, the comparison table."""
from __future__ import annotations

from pathlib import Path

import pytest

from sim.results.metrics import SUMMARY_KEYS
from sim.results.outputs import SCHEMA, typed_table, write_tables
from sim.results.table import comparison_table


def _columns(allocator: str, start: int, count: int) -> dict[str, list[object]]:
    spec = SCHEMA["files"]["steps.parquet"]["columns"]
    sample = {"int64": 1, "float64": 0.5, "string": allocator, "bool": False}
    columns = {name: [sample[col["type"]]] * count for name, col in spec.items()}
    columns["step"] = list(range(start, start + count))
    return columns


def test_tables_written_in_parts_equal_one_table(tmp_path: Path) -> None:
    """Two allocators' typed tables make the same file bytes as their joined columns."""
    a, b = _columns("paged", 0, 3), _columns("max", 0, 2)
    write_tables(tmp_path / "parts.parquet", "steps.parquet",
                 [typed_table("steps.parquet", a), typed_table("steps.parquet", b)])
    joined = {name: a[name] + b[name] for name in a}
    write_tables(tmp_path / "one.parquet", "steps.parquet", [typed_table("steps.parquet", joined)])
    assert (tmp_path / "parts.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()
    write_tables(tmp_path / "none.parquet", "steps.parquet", [])
    assert (tmp_path / "none.parquet").stat().st_size > 0


def test_columns_must_be_the_schemas() -> None:
    """A missing or extra column is refused, naming it."""
    columns = _columns("paged", 0, 1)
    del columns["swap_s"]
    with pytest.raises(ValueError, match="swap_s"):
        typed_table("steps.parquet", columns)


def test_comparison_table_has_a_column_per_allocator() -> None:
    """Metrics are rows, allocators columns; a missing value is '-'; no run is one line."""
    summary = {key: 1.0 for key in SUMMARY_KEYS} | {"num_finished": 3, "num_rejected": 0,
                                                    "num_preemptions": 2, "num_cow_copies": 0,
                                                    "prefix_hit_rate": None}
    lines = comparison_table({"paged": summary, "max": summary}).splitlines()
    assert lines[0].split() == ["metric", "paged", "max"]
    assert any(line.startswith("finished / rejected") and line.endswith("3 / 0")
               for line in lines)
    assert next(line for line in lines if line.startswith("prefix hit rate")).split()[-1] == "-"
    assert comparison_table({}) == "no allocator completed"
