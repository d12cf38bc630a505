"""Tests of the run figures (reports/memory, fragmentation, batch, latency, prefix) on real runs.

Each figure is inspected through its matplotlib objects: panel titles, axis labels, legend
texts and the number of drawn series, on a six-allocator run, a one-allocator run without
prefix caching and a run of a single engine step.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from reports import schema as S
from reports.batch import plot_batch_size
from reports.fragmentation import plot_fragmentation_cdfs
from reports.latency import plot_latency_cdfs, request_latencies
from reports.memory import plot_memory_timeline, plot_waste_bars
from reports.prefix import plot_prefix_cache, skip_reason
from reports.readers import RunResults, load_run
from reports.style import ALLOCATOR_COLORS, allocator_color
from reports.tables import occupied_shares
from tests.unit import reports_data

ALL = ["paged", "paged-nocache", "max", "pow2", "oracle", "ft"]
CATEGORY_LABELS = [label for _, label in S.MEMORY_CATEGORIES]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunResults:
    return load_run(reports_data.full_run(tmp_path_factory))


@pytest.fixture(scope="module")
def figures(run: RunResults) -> dict[str, Figure]:
    """Each run figure of the six-allocator run, drawn once for the whole module."""
    drawn = {"memory": plot_memory_timeline(run), "waste": plot_waste_bars(run),
             "fragmentation": plot_fragmentation_cdfs(run), "batch": plot_batch_size(run),
             "latency": plot_latency_cdfs(run), "prefix": plot_prefix_cache(run)}
    return {k: v for k, v in drawn.items() if v is not None}


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> RunResults:
    return load_run(reports_data.single_run(tmp_path_factory))


@pytest.fixture(scope="module")
def one_step(tmp_path_factory: pytest.TempPathFactory) -> RunResults:
    return load_run(reports_data.one_step_run(tmp_path_factory))


def legend_texts(fig: Figure) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_memory_timeline_has_a_panel_per_allocator(figures: dict[str, Figure]) -> None:
    """Six panels titled by allocator, six stacked areas each, shared legend of categories."""
    fig = figures["memory"]
    assert [ax.get_title(loc="left").split(":")[0] for ax in fig.axes] == ALL
    assert all(len(ax.collections) == len(S.MEMORY_CATEGORIES) for ax in fig.axes)
    assert legend_texts(fig) == CATEGORY_LABELS
    assert fig.axes[-1].get_xlabel() == "Simulated time (s)"
    assert fig.axes[0].get_ylabel() == "% of capacity"
    assert fig.axes[0].get_ylim() == (0.0, 100.0)


def test_memory_timeline_stacks_to_the_whole_capacity(figures: dict[str, Figure]) -> None:
    """The top of the stacked areas is 100% of capacity in every bin (categories add up)."""
    fig = figures["memory"]
    for ax in fig.axes:
        top = ax.collections[-1].get_paths()[0].vertices[:, 1]
        assert top.max() == pytest.approx(100.0)


def test_waste_bars_print_percentages_on_segments(run: RunResults,
                                                  figures: dict[str, Figure]) -> None:
    """One bar per allocator and category; paged's token-state share is printed on its bar."""
    fig = figures["waste"]
    left, right = fig.axes
    assert [t.get_text() for t in left.get_xticklabels()] == ALL
    assert len(left.patches) == len(ALL) * len(S.OCCUPIED_CATEGORIES)
    assert len(right.patches) == len(ALL) * len(S.MEMORY_CATEGORIES)
    paged = occupied_shares(run.summary["paged"])
    assert paged is not None
    assert f"{paged['token_states']:.1f}%" in [t.get_text() for t in left.texts]
    assert legend_texts(fig) == CATEGORY_LABELS
    assert "Fig. 2" in left.get_title()


def test_fragmentation_cdfs_have_a_line_per_allocator(figures: dict[str, Figure]) -> None:
    """Three panels, one CDF line per allocator in each, ending at 1."""
    fig = figures["fragmentation"]
    assert [ax.get_title() for ax in fig.axes] == [
        "Internal fragmentation", "External fragmentation", "KV utilisation (token states)"]
    for ax in fig.axes:
        assert [line.get_label() for line in ax.lines] == ALL
        assert all(line.get_ydata()[-1] == pytest.approx(1.0) for line in ax.lines)
        assert ax.get_xlabel() == "% of KV capacity"
    assert legend_texts(fig) == ALL


def test_batch_size_marks_the_mean(run: RunResults, figures: dict[str, Figure]) -> None:
    """Each panel draws the binned batch and a dashed line at the summary's mean."""
    fig = figures["batch"]
    for ax, name in zip(fig.axes, ALL):
        mean = run.summary[name]["mean_batch_size"]
        assert ax.get_title(loc="left") == f"{name}: mean {mean:.1f}"
        dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
        assert len(dashed) == 1 and dashed[0].get_ydata()[0] == pytest.approx(mean)
    assert fig.axes[-1].get_xlabel() == "Simulated time (s)"
    assert fig.get_supylabel() == "Running requests"


def curves(ax: Axes) -> list[Line2D]:
    """The CDF lines of a panel (markers are drawn as lines labelled "_...")."""
    return [line for line in ax.lines if not line.get_label().startswith("_")]


def test_latency_cdfs_cover_every_finished_request(run: RunResults,
                                                    figures: dict[str, Figure]) -> None:
    """TTFT, TPOT, normalised latency panels in ms; one line per allocator; the CDFs end at
    the largest latency in ms; means match the summary."""
    fig = figures["latency"]
    assert [ax.get_xlabel() for ax in fig.axes] == [
        "TTFT (ms)", "TPOT (ms/token)", "End-to-end latency / output tokens (ms/token)"]
    assert all([line.get_label() for line in curves(ax)] == ALL for ax in fig.axes)
    for name in ALL:
        values = request_latencies(run.requests_of(name))
        assert values["ttft"].mean() == pytest.approx(run.summary[name]["ttft_mean_s"])
        assert values["norm"].mean() == pytest.approx(run.summary[name]["norm_latency_mean_s"])
    ttft = {line.get_label(): line for line in curves(fig.axes[0])}
    for name in ALL:
        top = 1000.0 * request_latencies(run.requests_of(name))["ttft"].max()
        assert ttft[name].get_xdata()[-1] == pytest.approx(top)


def test_latency_cdfs_mark_p50_and_p99(run: RunResults, figures: dict[str, Figure]) -> None:
    """Each curve has a dot at (p50 in ms, 0.5) and a diamond at (p99 in ms, 0.99) in its
    colour; the legend explains both markers."""
    fig = figures["latency"]
    for ax, key in zip(fig.axes, ("ttft", "tpot", "norm")):
        for name in ALL:
            ms = 1000.0 * request_latencies(run.requests_of(name))[key]
            for pct, marker in ((50, "o"), (99, "D")):
                mark = [line for line in ax.lines
                        if line.get_label() == f"_p{pct} {name}"]
                assert len(mark) == 1 and mark[0].get_marker() == marker
                assert mark[0].get_xdata()[0] == pytest.approx(np.percentile(ms, pct))
                assert mark[0].get_ydata()[0] == pct / 100
                assert mark[0].get_color() == ALLOCATOR_COLORS[name]
    assert legend_texts(fig)[-2:] == ["p50 of each curve", "p99 of each curve"]


def test_latency_ticks_are_plain_numbers(figures: dict[str, Figure]) -> None:
    """Log axes are labelled 10, 100, 1,000 (no powers of ten), and labels do not overlap."""
    fig = figures["latency"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
        lo, hi = ax.get_xlim()
        shown = [t for t in labels if lo <= t.get_position()[0] <= hi]
        assert len(shown) >= 3
        assert all("$" not in t.get_text() and "e" not in t.get_text() for t in shown)
        boxes = sorted((t.get_window_extent(renderer) for t in shown), key=lambda b: b.x0)
        assert all(a.x1 <= b.x0 for a, b in itertools.pairwise(boxes))


def test_prefix_cache_plots_only_caching_allocators(run: RunResults,
                                                     figures: dict[str, Figure]) -> None:
    """Only paged has caching on; the cumulative curve ends at the summary hit rate."""
    fig = figures["prefix"]
    binned, cumulative = fig.axes
    assert [line.get_label() for line in binned.lines] == ["paged"]
    rate = 100.0 * run.summary["paged"]["prefix_hit_rate"]
    assert cumulative.lines[0].get_label() == f"paged (final {rate:.1f}%)"
    assert cumulative.lines[0].get_ydata()[-1] == pytest.approx(rate)
    assert binned.get_ylabel() == "Hit rate (% of prompt tokens)"
    ideal = 100.0 * run.trace_summary["prefix_reuse"]["fraction"]
    legend = [t.get_text() for t in cumulative.get_legend().get_texts()]
    assert legend[-1] == f"ideal, infinite cache ({ideal:.1f}%)"


def test_one_allocator_without_caching(single: RunResults) -> None:
    """One allocator gives one panel each; without prefix caching that figure is None."""
    assert plot_prefix_cache(single) is None
    assert len(plot_memory_timeline(single).axes) == 1
    assert len(plot_batch_size(single).axes) == 1
    assert [line.get_label() for line in curves(plot_latency_cdfs(single).axes[0])] == ["max"]
    assert len(plot_waste_bars(single).axes[0].patches) == len(S.OCCUPIED_CATEGORIES)


def test_one_step_run_draws_every_figure(one_step: RunResults) -> None:
    """A single-step run still draws every figure; TPOT says why it is empty."""
    assert all(len(one_step.steps_of(n)) == 1 for n in one_step.allocators)
    assert len(plot_memory_timeline(one_step).axes) == 2
    assert len(plot_fragmentation_cdfs(one_step).axes[0].lines) == 2
    latency = plot_latency_cdfs(one_step)
    assert [t.get_text() for t in latency.axes[1].texts] == [
        "no finished request with 2+ output tokens"]
    texts = [t.get_text() for t in plot_waste_bars(one_step).axes[0].texts]
    assert texts == ["nothing held", "nothing held"]


def test_allocator_colours_are_fixed_across_figures(figures: dict[str, Figure]) -> None:
    """An allocator's lines have its palette colour in every figure; palette colours differ."""
    assert len(set(ALLOCATOR_COLORS.values())) == len(ALLOCATOR_COLORS)
    assert allocator_color("my.module:Custom") == allocator_color("my.module:Custom")
    for fig in (figures["fragmentation"], figures["latency"]):
        for line in curves(fig.axes[0]):
            assert line.get_color() == ALLOCATOR_COLORS[line.get_label()]


def test_prefix_cache_says_readmissions_count(figures: dict[str, Figure]) -> None:
    """The figure states that re-admissions after preemption count as hits."""
    note = figures["prefix"].get_supxlabel()
    assert "re-admissions after preemption" in note and "exceed the ideal line" in note


def test_no_prefix_panel_without_shared_content(one_step: RunResults) -> None:
    """A trace whose prompts share nothing (Azure sizes only) gets no prefix-cache figure,
    with the reason, although paged ran with prefix caching on."""
    assert one_step.caching("paged")
    assert one_step.trace_summary["prefix_reuse"]["method"].startswith("none")
    assert plot_prefix_cache(one_step) is None
    assert "no shared content" in str(skip_reason(one_step))
