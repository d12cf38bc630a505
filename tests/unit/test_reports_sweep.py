"""Tests of reports/sweep.py and reports/sweep_plots.py: capacity, tables and the two figures."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from reports import ReportError
from reports import schema as S
from reports.sweep import capacity, capacity_table, capacity_text, fix_other_axes, load_sweep
from reports.sweep_plots import is_geometric, plot_latency_vs_rate, plot_waste_vs_block_size
from tests.unit import reports_data


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return reports_data.rate_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reports_data.sweep_dir(tmp_path_factory)


def test_capacity_stops_at_the_first_violation() -> None:
    """Rates 1, 2, 4, 8 with latencies 0.1, 0.15, 0.3, 0.1: capacity 2 (8 comes after a miss)."""
    assert capacity([4, 1, 8, 2], [0.3, 0.1, 0.1, 0.15], 0.2) == (2, True)
    assert capacity([1, 2], [0.1, 0.1], 0.2) == (2, False)
    assert capacity([1, 2], [0.5, None], 0.2) == (None, True)
    assert capacity_text(2, False) == ">= 2"
    assert capacity_text(None, True) == "below the lowest rate"


def test_result_dirs_become_a_sweep_table(runs: list[Path]) -> None:
    """Three runs of two allocators give six rows with block size and request rate."""
    table = load_sweep(runs)
    assert len(table) == 6 and set(table[S.ALLOCATOR]) == {"paged", "max"}
    assert sorted(table["block_size"].unique()) == [16, 32]
    assert table["request_rate"].nunique() == 2
    fixed, note = fix_other_axes(table, "request_rate")
    assert set(fixed["block_size"]) == {16} and note == "block size 16"


def test_latency_vs_rate_from_result_dirs(runs: list[Path]) -> None:
    """One curve per allocator plus the SLO line; labels carry capacities; units on axes."""
    fig = plot_latency_vs_rate(load_sweep(runs), slo=0.2)
    assert fig is not None
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.lines if not line.get_label().startswith("_")]
    assert labels[-1] == "SLO 200 ms/token"
    assert [lbl.split(" (")[0] for lbl in labels[:-1]] == ["paged", "max"]
    assert all("capacity" in lbl for lbl in labels[:-1])
    assert ax.get_xlabel() == "Request rate (req/s)"
    assert ax.get_ylabel() == "Mean normalised latency (ms/token)"
    assert "trace built-in default workload | model Llama-2-7B | GPU A100-80GB" in ax.get_title()


def test_waste_vs_block_size_from_result_dirs(runs: list[Path]) -> None:
    """Block sizes 16 and 32 at the common rate give two points per allocator."""
    fig = plot_waste_vs_block_size(load_sweep(runs))
    assert fig is not None
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == ["paged", "max"]
    assert all(list(line.get_xdata()) == [16, 32] for line in ax.lines)
    assert ax.get_xlabel() == "Block size (tokens per block, log scale)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32"]


def test_sweep_directory_gets_request_rates(sweep: Path) -> None:
    """A sim.sweep directory reads back with each cell's request rate in req/s."""
    table = load_sweep([sweep])
    assert len(table) == 4 and table.attrs["failed_cells"] == 0
    assert table["request_rate"].nunique() == 2
    ratio = table["request_rate"].max() / table["request_rate"].min()
    assert ratio == pytest.approx(8.0, rel=0.01)
    caps = capacity_table(table, 0.2)
    assert [name for name, _, _ in caps] == ["paged", "max"]
    assert plot_waste_vs_block_size(table) is None
    assert plot_latency_vs_rate(table) is not None


def test_missing_sweep_file_is_named(tmp_path: Path) -> None:
    """A directory with neither sweep.parquet nor summary.json names the missing file."""
    with pytest.raises(ReportError, match=r"sweep\.parquet: file not found"):
        load_sweep([tmp_path])


def synthetic_sweep(rates: list[float], latencies: dict[str, list[float]]) -> pd.DataFrame:
    rows = [{S.ALLOCATOR: name, "request_rate": r, S.NORM_LATENCY: v}
            for name, values in latencies.items() for r, v in zip(rates, values, strict=True)]
    table = pd.DataFrame(rows)
    table.attrs["context"] = {"trace": "t.csv", "model": "M-7B", "gpu": "G-80GB"}
    return table


def test_points_above_the_axis_are_marked_with_their_values() -> None:
    """Latencies above 5 x SLO sit on the top edge as triangles with their ms values printed,
    and the legend says so; nothing is dropped."""
    table = synthetic_sweep([1, 2, 4, 8], {"paged": [0.05, 0.1, 0.15, 0.3],
                                           "max": [0.1, 0.5, 2.0, 7.5]})
    fig = plot_latency_vs_rate(table, slo=0.2)
    assert fig is not None
    ax = fig.axes[0]
    top = ax.get_ylim()[1]
    assert top == pytest.approx(1000.0)                      # 5 x 200 ms/token
    marks = [line for line in ax.lines if line.get_marker() == "^"]
    assert [(m.get_xdata()[0], m.get_ydata()[0]) for m in marks] == [(4, top), (8, top)]
    assert [t.get_text() for t in ax.texts] == ["2,000", "7,500"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1] == "above 1,000 ms/token (value printed)"
    paged = next(line for line in ax.lines if line.get_label().startswith("paged"))
    assert list(paged.get_ydata()) == pytest.approx([50, 100, 150, 300])


def test_geometric_rate_grids_get_a_log_axis() -> None:
    """Rates 1, 2, 4, 8 (a fixed ratio) give a log x axis ticked at the rates; 1, 2, 3, 4 a
    linear one from 0. The title names trace, model and GPU."""
    geo = plot_latency_vs_rate(synthetic_sweep([1, 2, 4, 8], {"paged": [0.1] * 4}))
    lin = plot_latency_vs_rate(synthetic_sweep([1, 2, 3, 4], {"paged": [0.1] * 4}))
    assert geo is not None and lin is not None
    assert geo.axes[0].get_xscale() == "log" and lin.axes[0].get_xscale() == "linear"
    assert [t.get_text() for t in geo.axes[0].get_xticklabels()] == ["1", "2", "4", "8"]
    assert lin.axes[0].get_xlim()[0] == 0
    assert "trace t.csv | model M-7B | GPU G-80GB" in geo.axes[0].get_title()
    assert is_geometric([0.25, 0.5, 1, 2, 4]) and not is_geometric([1, 2, 3])
    assert not is_geometric([1, 2]) and is_geometric([3.16, 6.33, 12.7, 25.3, 50.6])


def test_a_swept_trace_is_held_and_named() -> None:
    """With trace as a sweep axis, one trace is drawn and the title names that one."""
    rows = [{S.ALLOCATOR: "paged", "request_rate": r, S.NORM_LATENCY: 0.1, "trace": t}
            for t in ("a/x.csv", "b/y.csv") for r in (1, 2, 3)]
    table = pd.DataFrame(rows)
    table.attrs["context"] = {"trace": "x.csv", "model": "M", "gpu": "G"}
    fig = plot_latency_vs_rate(table)
    assert fig is not None
    title = fig.axes[0].get_title()
    held = "x.csv" if "trace a/x.csv" in title else "y.csv"
    assert f"trace {held} | model M" in title
    assert len(fig.axes[0].lines[0].get_xdata()) == 3
