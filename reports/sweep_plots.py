"""Sweep figures in the paper's shapes: latency vs request rate (Fig. 12), waste vs block size.

``plot_latency_vs_rate`` draws mean normalised latency (ms/token) against request rate, one
curve per allocator, the SLO as a grey line and each allocator's capacity (reports/sweep.py)
as a dotted vertical line in its colour. The y axis stops at ``CLIP_FACTOR`` SLOs, which is how
the paper shows a system "exploding"; a point above it is never dropped silently: it is drawn
as a triangle on the top edge with its value printed. A geometric rate grid (each rate a fixed
multiple of the last) gets a log x axis. ``plot_waste_vs_block_size`` draws the share of
occupied KV memory that is wasted against block size. Titles name the trace, model and GPU.
Both return None when the sweep does not vary the needed parameter.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from reports import schema as S
from reports.merge import context_line
from reports.style import allocator_color, line_style, new_figure, percent_axis
from reports.sweep import capacity, capacity_text, fix_other_axes, rate_column, rate_label
from reports.tables import occupied_shares

CLIP_FACTOR = 5.0   # y axis stops at this many SLOs; higher points sit on the edge, labelled
GEOMETRIC_TOLERANCE = 0.1


def is_geometric(values: npt.ArrayLike) -> bool:
    """True for three or more positive values whose successive ratios agree within 10%."""
    grid = np.unique(np.asarray(values, dtype=np.float64))
    if len(grid) < 3 or grid[0] <= 0:
        return False
    ratios = grid[1:] / grid[:-1]
    return bool(np.all(np.abs(ratios / np.median(ratios) - 1.0) <= GEOMETRIC_TOLERANCE))


def title_context(rows: pd.DataFrame, table: pd.DataFrame) -> str:
    """Trace, model and GPU of the rows drawn: the sweep's context, except for a swept one,
    which shows the value held for this figure."""
    context = dict(table.attrs.get("context") or {})
    for column in ("trace", "model", "gpu"):
        if column in rows.columns and table[column].nunique() > 1 and rows[column].nunique() == 1:
            value = rows[column].iloc[0]
            if isinstance(value, str):
                context[column] = Path(value).name if column == "trace" else value
    return context_line(context)


def _mark_clipped(ax: Axes, rates: npt.NDArray[np.float64], latency: npt.NDArray[np.float64],
                  top: float, name: str) -> int:
    """Triangles on the top edge for points above it, each with its value; returns how many."""
    above = np.flatnonzero(latency > top)
    for k in above:
        ax.plot([rates[k]], [top], marker="^", markersize=8, color=allocator_color(name),
                markeredgecolor="black", clip_on=False, zorder=20, linestyle="none")
        ax.annotate(f"{latency[k]:,.0f}", (rates[k], top), textcoords="offset points",
                    xytext=(0, -14), ha="center", fontsize="x-small",
                    color=allocator_color(name))
    return len(above)


def _rate_axis(ax: Axes, rates: npt.NDArray[np.float64], column: str) -> None:
    if is_geometric(rates):
        grid = np.unique(rates)
        ax.set_xscale("log")
        ax.set_xticks(grid, [f"{r:.3g}" for r in grid])
        ax.minorticks_off()
        ax.set_xlim(grid[0] / 1.25, grid[-1] * 1.25)
    else:
        ax.set_xlim(left=0)
    ax.set_xlabel(rate_label(column) + (" (log scale)" if is_geometric(rates) else ""))


def plot_latency_vs_rate(table: pd.DataFrame, slo: float = S.DEFAULT_SLO_S) -> Figure | None:
    """Normalised latency vs request rate per allocator, capacities marked (Fig. 12 shape)."""
    column = rate_column(table)
    if column is None or table[column].nunique() < 2:
        return None
    rows, note = fix_other_axes(table, column)
    fig, (ax,) = new_figure(1, 1, height=5.0, width=9.0)
    slo_ms, highest, clipped = 1000.0 * slo, 0.0, 0
    top = CLIP_FACTOR * slo_ms
    for index, name in enumerate(dict.fromkeys(rows[S.ALLOCATOR])):
        mine = rows[rows[S.ALLOCATOR] == name].sort_values(column)
        rates = mine[column].astype(float).to_numpy()
        seconds = pd.to_numeric(mine[S.NORM_LATENCY], errors="coerce").to_numpy(np.float64)
        cap, exceeded = capacity(rates.tolist(), seconds.tolist(), slo)
        latency = 1000.0 * seconds
        label = f"{name} (capacity {capacity_text(cap, exceeded)})"
        ax.plot(rates, latency, marker="o", markersize=4, label=label, **line_style(name, index))
        if cap is not None and exceeded:
            ax.axvline(cap, color=allocator_color(name), linestyle=":", linewidth=1.4)
        highest = max([highest, *latency[np.isfinite(latency)].tolist()])
        clipped += _mark_clipped(ax, rates, latency, top, name)
    ax.axhline(slo_ms, color="grey", linestyle="--", linewidth=1.0,
               label=f"SLO {slo_ms:g} ms/token")
    handles, labels = ax.get_legend_handles_labels()
    if clipped:
        handles.append(Line2D([], [], marker="^", color="grey", markeredgecolor="black",
                              linestyle="none"))
        labels.append(f"above {top:,.0f} ms/token (value printed)")
    ax.set_ylim(0, min(max(highest, slo_ms) * 1.08, top))
    _rate_axis(ax, rows[column].astype(float).to_numpy(), column)
    ax.set_ylabel("Mean normalised latency (ms/token)")
    ax.grid(alpha=0.3)
    ax.legend(handles, labels, loc="upper left", fontsize="small", framealpha=0.9)
    title = (f"Normalised latency vs request rate (dotted: each allocator's capacity)\n"
             f"{title_context(rows, table)}")
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize="medium")
    return fig


def plot_waste_vs_block_size(table: pd.DataFrame) -> Figure | None:
    """Wasted share of occupied KV memory vs block size, one line per allocator."""
    if S.SWEEP_BLOCK_SIZE not in table.columns or table[S.SWEEP_BLOCK_SIZE].nunique() < 2:
        return None
    rows, note = fix_other_axes(table, S.SWEEP_BLOCK_SIZE)
    fig, (ax,) = new_figure(1, 1, height=5.0, width=9.0)
    sizes: set[int] = set()
    for index, name in enumerate(dict.fromkeys(rows[S.ALLOCATOR])):
        mine = rows[rows[S.ALLOCATOR] == name].sort_values(S.SWEEP_BLOCK_SIZE)
        x, waste = [], []
        for _, row in mine.iterrows():
            shares = occupied_shares(row.to_dict())
            if shares is not None:
                x.append(int(row[S.SWEEP_BLOCK_SIZE]))
                waste.append(100.0 - shares["token_states"])
        sizes.update(x)
        ax.plot(x, waste, marker="o", markersize=4, label=name, **line_style(name, index))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(sizes), [str(s) for s in sorted(sizes)])
    ax.minorticks_off()
    ax.set_ylim(0, 100)
    percent_axis(ax.yaxis)
    ax.set_xlabel("Block size (tokens per block, log scale)")
    ax.set_ylabel("Wasted KV memory (% of occupied)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small", framealpha=0.9)
    title = ("KV waste vs block size (reserved + internal + external fragmentation)\n"
             f"{title_context(rows, table)}")
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize="medium")
    return fig
