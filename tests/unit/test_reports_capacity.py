"""Tests of reports/capacity*.py on a real `python -m sim.sweep --capacity` directory: the
table, the probe and bar figures (what they show, checked through matplotlib objects), the
report files and the one-line refusals."""
from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from reports import ReportError
from reports.__main__ import main
from reports.capacity import capacity_cell, load_capacity
from reports.capacity_plots import plot_capacity_bars, plot_capacity_probes
from reports.capacity_report import build_capacity, capacity_rows
from reports.style import ALLOCATOR_COLORS
from tests.unit import reports_data


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return reports_data.capacity_dir(tmp_path_factory)


def searches(path: Path) -> dict[str, dict[str, object]]:
    data = json.loads((path / "capacity.json").read_text())
    return {s["allocator"]: s for s in data["searches"]}


def test_table_states_each_capacity_and_bound(search: Path) -> None:
    """One row per search with req/s and rate scale; a search that hit its limit reads >=."""
    results = load_capacity(search)
    header, rows = capacity_rows(results)
    assert header == ["capacity", "status", "lowest rate scale that missed", "probes"]
    by_name = {label: cells for label, _, cells in rows}
    raw = searches(search)
    for name, cells in by_name.items():
        assert cells[0] == capacity_cell(raw[name])
        assert cells[3] == str(len(raw[name]["probes"]))   # type: ignore[arg-type]
    assert by_name["paged"][0].startswith(">= ") and by_name["paged"][1].startswith("above")
    assert by_name["max"][1] == "found" and "req/s" in by_name["max"][0]
    assert results.context["model"] == "Llama-2-7B"


def test_probe_figure_shows_every_probe(search: Path) -> None:
    """Each allocator's line holds all its probes at base rate x rate_scale, in ms/token; the
    SLO line sits at slo x 1000; the found capacity is a dotted line in the allocator's
    colour; the x axis is logarithmic and the y axis shows every probe (nothing clipped)."""
    results = load_capacity(search)
    fig = plot_capacity_probes(results)
    ax = fig.axes[0]
    raw = searches(search)
    lines = {line.get_label(): line for line in ax.lines if not line.get_label().startswith("_")}
    for name, entry in raw.items():
        base = float(entry["base_rate_req_s"])  # type: ignore[arg-type]
        probes = sorted(entry["probes"])  # type: ignore[type-var]
        assert list(lines[name].get_xdata()) == pytest.approx([base * r for r, _ in probes])
        assert list(lines[name].get_ydata()) == pytest.approx([1000 * v for _, v in probes])
        assert lines[name].get_color() == ALLOCATOR_COLORS[name]
    slo_ms = 1000 * results.slo
    assert any(list(line.get_ydata()) == [slo_ms, slo_ms] for line in ax.lines)
    cap = float(raw["max"]["capacity_req_s"])  # type: ignore[arg-type]
    dotted = [line for line in ax.lines if line.get_linestyle() == ":"]
    assert [line.get_xdata()[0] for line in dotted] == pytest.approx([cap])
    assert ax.get_xscale() == "log" and ax.get_ylabel() == "Normalised latency mean (ms/token)"
    top = max(1000 * v for s in raw.values() for _, v in s["probes"])  # type: ignore[attr-defined]
    assert ax.get_ylim()[1] >= top
    assert "model Llama-2-7B" in fig.get_suptitle()


def test_bar_figure_hatches_bounds(search: Path) -> None:
    """Bars are capacities in req/s; the above-max search is hatched and labelled >=."""
    fig = plot_capacity_bars(load_capacity(search))
    ax = fig.axes[0]
    raw = searches(search)
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([float(raw[n]["capacity_req_s"])  # type: ignore[arg-type]
                                     for n in ("paged", "max")])
    assert [p.get_hatch() for p in ax.patches] == ["//", None]
    texts = [t.get_text() for t in ax.texts]
    assert texts[0].startswith(">= ") and not texts[1].startswith(">=")
    assert ax.get_yscale() == ("log" if max(heights) / min(heights) > 30 else "linear")


def test_cli_reads_a_capacity_directory(search: Path, tmp_path: Path) -> None:
    """python -m reports DIR on a capacity search writes report.html/.md and both images."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(search), "--out", str(tmp_path)])
    assert code == 0 and out.getvalue().strip() == str(tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert ">Capacity</h2>" in html and "paged / max capacity" in html
    assert "ms/token" in html
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "capacity_bars.png", "capacity_probes.png"]
    assert "capacity_probes.png" in (tmp_path / "report.md").read_text(encoding="utf-8")


def test_capacity_beside_a_sweep_gets_its_own_name(
        search: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A directory holding both sweep.parquet and capacity.json gets both reports."""
    sweep = reports_data.sweep_dir(tmp_path_factory)
    both = Path(shutil.copytree(search, tmp_path / "both"))
    shutil.copytree(sweep / "cells", both / "cells")
    shutil.copy(sweep / "sweep.parquet", both / "sweep.parquet")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(both)]) == 0
    assert out.getvalue().split() == [str(both / "report.html"),
                                      str(both / "capacity_report.html")]
    assert "sweep report" in (both / "report.html").read_text(encoding="utf-8")
    assert "capacity report" in (both / "capacity_report.html").read_text(encoding="utf-8")
    assert build_capacity(both, tmp_path / "alone").name == "report.html"


@pytest.mark.parametrize(("edit", "words"), [
    (lambda d: d.pop("searches"), "'searches' must be a non-empty list"),
    (lambda d: d["settings"].pop("slo"), "'settings.slo' must be a number"),
    (lambda d: d["searches"][0].pop("probes"), "searches[0] lacks probes"),
    (lambda d: d["searches"][1].update(probes=[[1.0]]), "searches[1].probes must be"),
])
def test_bad_capacity_json_is_one_line(search: Path, tmp_path: Path, edit: object,
                                       words: str) -> None:
    """A malformed capacity.json: ReportError naming the file; the CLI exits 2, one line."""
    broken = Path(shutil.copytree(search, tmp_path / "c"))
    data = json.loads((broken / "capacity.json").read_text())
    edit(data)  # type: ignore[operator]
    (broken / "capacity.json").write_text(json.dumps(data))
    with pytest.raises(ReportError, match=words.replace("[", r"\[").replace("]", r"\]")):
        load_capacity(broken)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main([str(broken), "--out", str(tmp_path / "out")]) == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and str(broken / "capacity.json") in lines[0]
    assert not (tmp_path / "out").exists()
