"""Tests of the run figures (reports/memory, fragmentation, batch, latency, prefix) on real runs.

Each figure is inspected through its matplotlib objects: panel titles, axis labels, legend
texts and the number of drawn series, on a six-allocator run, a one-allocator run without
prefix caching and a run of a single engine step.
"""
from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from reports import schema as S
from reports.batch import plot_batch_size
from reports.fragmentation import plot_fragmentation_cdfs
from reports.latency import plot_latency_cdfs, request_latencies
from reports.memory import plot_memory_timeline, plot_waste_bars
from reports.prefix import plot_prefix_cache
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


def test_latency_cdfs_cover_every_finished_request(run: RunResults,
                                                    figures: dict[str, Figure]) -> None:
    """TTFT, TPOT, normalised latency panels; one line per allocator; means match summary."""
    fig = figures["latency"]
    assert [ax.get_xlabel() for ax in fig.axes] == [
        "TTFT (s)", "TPOT (s/token)", "End-to-end latency / output tokens (s/token)"]
    assert all([line.get_label() for line in ax.lines] == ALL for ax in fig.axes)
    for name in ALL:
        values = request_latencies(run.requests_of(name))
        assert values["ttft"].mean() == pytest.approx(run.summary[name]["ttft_mean_s"])
        assert values["norm"].mean() == pytest.approx(run.summary[name]["norm_latency_mean_s"])


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
    assert [line.get_label() for line in plot_latency_cdfs(single).axes[0].lines] == ["max"]
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
        for line in fig.axes[0].lines:
            assert line.get_color() == ALLOCATOR_COLORS[line.get_label()]
