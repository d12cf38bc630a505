"""Distributions of fragmentation and utilisation over a run (CDFs, one line per allocator).

For each allocator, the per-step internal fragmentation, external fragmentation and KV
utilisation (slots holding token states), each as a share of capacity, are drawn as empirical
CDFs weighted by step duration, so a point (x, y) reads "for a share y of the run's busy time,
the value was at most x". Long runs of short steps therefore count as much as a few long ones.
"""
from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from reports import schema as S
from reports.readers import RunResults
from reports.series import weighted_cdf
from reports.style import line_style, new_figure, percent_axis

PANELS = (
    ("internal_frag", "Internal fragmentation"),
    ("external_frag", "External fragmentation"),
    ("token_states", "KV utilisation (token states)"),
)


def plot_fragmentation_cdfs(run: RunResults) -> Figure:
    """Three CDF panels (internal, external fragmentation, utilisation), a line per allocator."""
    fig, axes = new_figure(1, len(PANELS), height=4.2, width=13.0, sharey=True)
    for ax, (column, title) in zip(axes, PANELS):
        top = max([_cdf_line(ax, run, name, index, column)
                   for index, name in enumerate(run.allocators)] + [1.0])
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("% of KV capacity")
        ax.set_xlim(-0.02 * top, top)
        percent_axis(ax.xaxis)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Share of busy time at or below x")
    axes[0].set_ylim(0, 1.02)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6),
               frameon=False, fontsize="small")
    fig.suptitle("Distribution of per-step fragmentation and utilisation (duration-weighted CDF)")
    return fig


def _cdf_line(ax: Axes, run: RunResults, name: str, index: int, column: str) -> float:
    """Draw one CDF; returns a round upper x limit (percent) that shows all of it."""
    steps = run.steps_of(name)
    capacity = run.capacity(name)
    if not len(steps) or capacity <= 0:
        return 0.0
    share = steps[column].to_numpy(np.float64) * 100.0 / capacity
    x, y = weighted_cdf(share, steps[S.DURATION].to_numpy(np.float64))
    ax.step(x, y, where="post", label=name, **line_style(name, index))
    return min(100.0, 10.0 * np.ceil(float(x.max()) / 10.0 + 0.2))
