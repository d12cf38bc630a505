"""Batch size over time: running requests per step, one panel per allocator, mean marked.

The batch is the number of requests running after each step (a request with n samples counts
once), averaged over time bins as in reports/series.py. The dashed line is the summary's
``mean_batch_size`` (step-duration-weighted), the number the paper's throughput gains trace
back to: memory that is not wasted becomes a larger batch.
"""
from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from reports import schema as S
from reports.readers import RunResults
from reports.series import bin_edges, time_average
from reports.style import allocator_color, new_figure


def plot_batch_size(run: RunResults) -> Figure:
    """Running requests over time per allocator with the run's mean batch size marked."""
    names = run.allocators
    fig, axes = new_figure(len(names), 1, sharex=True, sharey=True,
                           height=max(3.2, 1.7 * len(names) + 1.0))
    top = max([_batch_panel(ax, run, name) for ax, name in zip(axes, names)] + [1.0])
    axes[0].set_ylim(0, top * 1.1)
    axes[-1].set_xlim(*run.time_span())
    axes[-1].set_xlabel("Simulated time (s)")
    fig.supylabel("Running requests")
    handles = [Line2D([], [], color="grey", linewidth=1.0, label="running requests (time-binned)"),
               Line2D([], [], color="black", linestyle="--", linewidth=1.2,
                      label="mean batch size (duration-weighted)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False,
               fontsize="small")
    fig.suptitle("Batch size over time (running requests after each step)")
    return fig


def _batch_panel(ax: Axes, run: RunResults, name: str) -> float:
    """Draw one allocator's panel; returns the highest value drawn."""
    steps = run.steps_of(name)
    color = allocator_color(name)
    mean = run.summary[name].get("mean_batch_size")
    mean_text = f"mean {mean:.1f}" if mean is not None else "no mean"
    ax.set_title(f"{name}: {mean_text}", loc="left", fontsize="medium", color=color)
    ax.grid(alpha=0.3)
    if not len(steps):
        ax.text(0.5, 0.5, "no steps recorded", transform=ax.transAxes, ha="center")
        return 0.0
    start = steps[S.TIME].to_numpy(np.float64)
    end = float(start[-1] + steps[S.DURATION].iloc[-1])
    edges = bin_edges(start, end)
    running = time_average(start, end, steps[S.RUNNING].to_numpy(np.float64), edges)
    line = np.append(running, running[-1])
    ax.step(edges, line, where="post", color=color, linewidth=1.0, label=name)
    ax.fill_between(edges, line, step="post", color=color, alpha=0.2)
    if mean is not None:
        ax.axhline(mean, color="black", linestyle="--", linewidth=1.2)
    return max(float(running.max()), mean or 0.0)
