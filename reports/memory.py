"""Where the KV memory went: stacked areas over time and Fig. 2-style average waste bars.

The simulator classifies every KV slot after each step as token states, reserved, internal
fragmentation, external fragmentation, cached-evictable or free (allocator/waste.py; the
paper's section 3.1). ``plot_memory_timeline`` stacks those six shares of capacity over time,
one panel per allocator. ``plot_waste_bars`` shows the run averages: on the left the occupied
memory split as the paper's Fig. 2 splits it, on the right the whole capacity.
"""
from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from reports import schema as S
from reports.readers import RunResults
from reports.series import bin_edges, time_average
from reports.style import CATEGORY_COLORS, allocator_color, new_figure, percent_axis
from reports.tables import capacity_shares, occupied_shares

MIN_LABEL_PCT = 4.0   # segments thinner than this get no printed percentage (it would not fit)


def plot_memory_timeline(run: RunResults) -> Figure:
    """Stacked shares of KV capacity per memory category over time, one panel per allocator."""
    names = run.allocators
    fig, axes = new_figure(len(names), 1, sharex=True, height=max(3.4, 2.0 * len(names) + 1.2))
    for ax, name in zip(axes, names):
        _memory_panel(ax, run, name)
    axes[-1].set_xlim(*run.time_span())
    axes[-1].set_xlabel("Simulated time (s)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False,
               fontsize="small")
    fig.suptitle("KV-cache memory over time (share of each allocator's capacity)")
    return fig


def _memory_panel(ax: Axes, run: RunResults, name: str) -> None:
    steps = run.steps_of(name)
    capacity = run.capacity(name)
    ax.set_title(f"{name}: {capacity:,} token slots", loc="left", fontsize="medium",
                 color=allocator_color(name))
    ax.set_ylabel("% of capacity")
    ax.set_ylim(0, 100)
    percent_axis(ax.yaxis)
    if not len(steps) or capacity <= 0:
        ax.text(0.5, 0.5, "no steps recorded", transform=ax.transAxes, ha="center")
        return
    start = steps[S.TIME].to_numpy(np.float64)
    end = float(start[-1] + steps[S.DURATION].iloc[-1])
    edges = bin_edges(start, end)
    layers = []
    for column, _ in S.MEMORY_CATEGORIES:
        share = time_average(start, end, steps[column].to_numpy(np.float64), edges)
        layers.append(np.append(share, share[-1]) * 100.0 / capacity)
    ax.stackplot(edges, *layers, step="post", labels=[lbl for _, lbl in S.MEMORY_CATEGORIES],
                 colors=[CATEGORY_COLORS[c] for c, _ in S.MEMORY_CATEGORIES], linewidth=0)


def plot_waste_bars(run: RunResults) -> Figure:
    """Average memory split per allocator: occupied memory (Fig. 2) and whole capacity."""
    names = run.allocators
    width = min(14.0, max(8.0, 1.5 * len(names) * 2 + 2.5))
    fig, (left, right) = new_figure(1, 2, height=4.8, width=width)
    _stacked_bars(left, names, {n: occupied_shares(run.summary[n]) for n in names},
                  S.OCCUPIED_CATEGORIES)
    left.set_title("Occupied KV memory (paper Fig. 2 style)", fontsize="medium")
    left.set_ylabel("% of occupied KV memory (time average)")
    _stacked_bars(right, names, {n: capacity_shares(run.summary[n]) for n in names},
                  tuple(c for c, _ in S.MEMORY_CATEGORIES))
    right.set_title("Whole KV capacity", fontsize="medium")
    right.set_ylabel("% of KV capacity (time average)")
    handles, labels = right.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=6 if width >= 11 else 3,
               frameon=False, fontsize="small")
    fig.suptitle("Average KV-cache usage and waste per allocator")
    return fig


def _stacked_bars(ax: Axes, names: list[str], shares: dict[str, dict[str, float] | None],
                  categories: tuple[str, ...]) -> None:
    x = np.arange(len(names))
    bottom = np.zeros(len(names))
    for category in categories:
        heights = np.array([(shares[n] or {}).get(category, 0.0) for n in names])
        bars = ax.bar(x, heights, 0.6, bottom=bottom, color=CATEGORY_COLORS[category],
                      label=S.category_label(category), edgecolor="white", linewidth=0.5)
        for bar, h, b in zip(bars, heights, bottom):
            if h >= MIN_LABEL_PCT:
                dark = category in ("internal_frag", "external_frag", "token_states")
                ax.text(bar.get_x() + bar.get_width() / 2, b + h / 2, f"{h:.1f}%",
                        ha="center", va="center", fontsize="small",
                        color="white" if dark else "black")
        bottom += heights
    for i, n in enumerate(names):
        if shares[n] is None:
            ax.text(i, 50, "nothing held", ha="center", va="center", fontsize="small")
    ax.set_xticks(x, names)
    for tick, n in zip(ax.get_xticklabels(), names):
        tick.set_color(allocator_color(n))
    ax.set_xlabel("Allocator")
    ax.set_ylim(0, 100)
    ax.set_xlim(-0.6, len(names) - 0.4)
    percent_axis(ax.yaxis)
