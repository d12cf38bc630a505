"""Tests of the assembled reports: files, image formats, HTML references and the CLI."""
from __future__ import annotations

import contextlib
import io
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from reports import ReportError, build_report, build_sweep_report
from reports import schema as S
from reports.__main__ import main
from tests.unit import reports_data

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN_PLOTS = {"waste_bars", "memory_timeline", "fragmentation_cdfs", "batch_size",
             "latency_cdfs", "prefix_cache"}


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.sources += [v for k, v in attrs if k == "src" and v]


def image_sources(html_path: Path) -> list[str]:
    parser = _Images()
    parser.feed(html_path.read_text(encoding="utf-8"))
    return parser.sources


def is_svg(path: Path) -> bool:
    head = path.read_bytes()[:400]
    return head.startswith(b"<?xml") and b"<svg" in path.read_bytes()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = reports_data.full_run(tmp_path_factory)
    return build_report(run_dir, tmp_path_factory.mktemp("report"))


def test_report_embeds_every_plot(report: Path) -> None:
    """report.html shows each of the six run figures as a valid PNG that exists on disk."""
    assert report.name == "report.html"
    sources = image_sources(report)
    assert {Path(s).stem for s in sources} == RUN_PLOTS
    for src in sources:
        image = report.parent / src
        assert image.read_bytes().startswith(PNG_MAGIC)
    on_disk = {p.relative_to(report.parent).as_posix() for p in report.parent.glob("plots/*")}
    assert on_disk == set(sources)


def test_report_contents_explain_the_run(report: Path) -> None:
    """The page holds the summary table, glossary, configuration and trace summary."""
    text = report.read_text(encoding="utf-8")
    for heading in ("Summary", "Figures", "How to read this report", "Configuration",
                    "Trace summary"):
        assert f">{heading}</h2>" in text
    assert "Normalised latency mean" in text and "Llama-2-7B" in text
    assert "scheduler.block_size" in text and "prompt_len.p99" in text


def test_markdown_summary_links_every_plot(report: Path) -> None:
    """report.md has the summary table with a column per allocator and links every image."""
    text = (report.parent / "report.md").read_text(encoding="utf-8")
    assert "| metric | paged | paged-nocache | max | pow2 | oracle | ft |" in text
    for slug in RUN_PLOTS:
        assert f"(plots/{slug}.png)" in text


def test_svg_report_without_prefix_caching(tmp_path_factory: pytest.TempPathFactory,
                                           tmp_path: Path) -> None:
    """SVG images are valid SVG; the prefix plot is listed as not drawn, with the reason."""
    html = build_report(reports_data.single_run(tmp_path_factory), tmp_path, fmt="svg")
    sources = image_sources(html)
    assert {Path(s).stem for s in sources} == RUN_PLOTS - {"prefix_cache"}
    assert all(is_svg(html.parent / s) for s in sources)
    assert "Not drawn: prefix caching was off" in html.read_text(encoding="utf-8")


def test_sweep_report_embeds_its_plot(tmp_path_factory: pytest.TempPathFactory,
                                      tmp_path: Path) -> None:
    """A sim.sweep directory gives a report with the latency-vs-rate figure and capacities."""
    html = build_sweep_report([reports_data.sweep_dir(tmp_path_factory)], tmp_path)
    assert [Path(s).name for s in image_sources(html)] == ["latency_vs_rate.png"]
    assert (tmp_path / "plots" / "latency_vs_rate.png").read_bytes().startswith(PNG_MAGIC)
    text = html.read_text(encoding="utf-8")
    assert ">Capacity</h2>" in text and "Not drawn: the sweep does not vary the block size" in text


def test_cli_builds_run_and_comparison_reports(tmp_path_factory: pytest.TempPathFactory,
                                               tmp_path: Path) -> None:
    """Two result dirs give two run reports and a comparison report; exit code 0."""
    runs = reports_data.rate_runs(tmp_path_factory)[:2]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(runs[0]), str(runs[1]), "--out", str(tmp_path)])
    assert code == 0
    printed = [Path(line) for line in out.getvalue().splitlines()]
    assert printed == [tmp_path / f"00_{runs[0].name}" / "report.html",
                       tmp_path / f"01_{runs[1].name}" / "report.html",
                       tmp_path / "report.html"]
    assert all(p.is_file() for p in printed)
    assert (tmp_path / "plots" / "latency_vs_rate.png").is_file()


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path_factory: pytest.TempPathFactory,
                                              tmp_path: Path) -> None:
    """A run missing summary.json: exit 2 and a single stderr line naming the file."""
    broken = Path(shutil.copytree(reports_data.single_run(tmp_path_factory), tmp_path / "r"))
    (broken / S.SUMMARY_FILE).write_text("{", encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([str(broken)])
    assert code == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and str(broken / S.SUMMARY_FILE) in lines[0]
    with pytest.raises(ReportError):
        build_report(tmp_path / "missing")


def test_simulate_report_flag_writes_the_report(tmp_path_factory: pytest.TempPathFactory,
                                                tmp_path: Path) -> None:
    """simulate.py --report leaves report.html and plots beside the results."""
    from simulate import main as simulate

    trace = tmp_path / "one.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,40,3\n", encoding="utf-8")
    with contextlib.redirect_stdout(io.StringIO()):
        code = simulate([str(trace), "--allocators", "paged", "--num-gpu-blocks", "50",
                         "--step-model", "roofline", "--no-progress", "--out",
                         str(tmp_path / "out"), "--report"])
    assert code == 0
    html = tmp_path / "out" / "report.html"
    assert {Path(s).stem for s in image_sources(html)} == RUN_PLOTS - {"prefix_cache"}
    assert "Not drawn: the trace has no shared content" in html.read_text(encoding="utf-8")


def test_reports_never_import_sim() -> None:
    """Every reports module loads without sim; `import reports` alone stays free of matplotlib."""
    import json
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    names = sorted(p.stem for p in (repo / "reports").glob("*.py") if p.stem != "__init__")
    code = ("import sys, json, reports; light = sorted(sys.modules); "
            + "; ".join(f"import reports.{n}" for n in names)
            + "; print(json.dumps([light, sorted(sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=repo, env={"PYTHONPATH": str(repo), "PATH": ""})
    light, full = json.loads(out.stdout)
    assert "matplotlib" not in light and "pandas" not in light
    assert "reports.build" in full and "matplotlib" in full
    assert [m for m in full if m == "sim" or m.startswith("sim.")] == []
