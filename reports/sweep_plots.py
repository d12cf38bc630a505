"""Sweep figures in the paper's shapes: latency vs request rate (Fig. 12), waste vs block size.

``plot_latency_vs_rate`` draws mean normalised latency (s/token) against request rate, one
curve per allocator, the SLO as a grey line and each allocator's capacity (reports/sweep.py)
as a dotted vertical line in its colour; latencies far above the SLO are clipped, which is how
the paper shows a system "exploding". ``plot_waste_vs_block_size`` draws the share of occupied
KV memory that is wasted (reserved + internal + external fragmentation) against block size.
Both return None when the sweep does not vary the needed parameter.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from reports import schema as S
from reports.style import allocator_color, line_style, new_figure, percent_axis
from reports.sweep import capacity, capacity_text, fix_other_axes, rate_column, rate_label
from reports.tables import occupied_shares

CLIP_FACTOR = 5.0   # y axis stops at this many SLOs; higher latencies run off the top


def plot_latency_vs_rate(table: pd.DataFrame, slo: float = S.DEFAULT_SLO_S) -> Figure | None:
    """Normalised latency vs request rate per allocator, capacities marked (Fig. 12 shape)."""
    column = rate_column(table)
    if column is None or table[column].nunique() < 2:
        return None
    rows, note = fix_other_axes(table, column)
    fig, (ax,) = new_figure(1, 1, height=4.8, width=9.0)
    top = 0.0
    for index, name in enumerate(dict.fromkeys(rows[S.ALLOCATOR])):
        mine = rows[rows[S.ALLOCATOR] == name].sort_values(column)
        rates = mine[column].astype(float).to_numpy()
        latency = pd.to_numeric(mine[S.NORM_LATENCY], errors="coerce").to_numpy(np.float64)
        cap, exceeded = capacity(rates.tolist(), latency.tolist(), slo)
        label = f"{name} (capacity {capacity_text(cap, exceeded)})"
        ax.plot(rates, latency, marker="o", markersize=4, label=label,
                **line_style(name, index))
        if cap is not None and exceeded:
            ax.axvline(cap, color=allocator_color(name), linestyle=":", linewidth=1.4)
        top = max(top, float(np.nanmax(latency)) if np.isfinite(latency).any() else 0.0)
    ax.axhline(slo, color="grey", linestyle="--", linewidth=1.0, label=f"SLO {slo:g} s/token")
    ax.set_ylim(0, min(max(top, slo) * 1.08, CLIP_FACTOR * slo))
    ax.set_xlim(left=0)
    ax.set_xlabel(rate_label(column))
    ax.set_ylabel("Mean normalised latency (s/token)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small", framealpha=0.9)
    title = "Normalised latency vs request rate (dotted: each allocator's capacity)"
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize="medium")
    return fig


def plot_waste_vs_block_size(table: pd.DataFrame) -> Figure | None:
    """Wasted share of occupied KV memory vs block size, one line per allocator."""
    if S.SWEEP_BLOCK_SIZE not in table.columns or table[S.SWEEP_BLOCK_SIZE].nunique() < 2:
        return None
    rows, note = fix_other_axes(table, S.SWEEP_BLOCK_SIZE)
    fig, (ax,) = new_figure(1, 1, height=4.8, width=9.0)
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
    ax.set_ylim(bottom=0)
    percent_axis(ax.yaxis)
    ax.set_xlabel("Block size (tokens per block)")
    ax.set_ylabel("Wasted KV memory (% of occupied)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small", framealpha=0.9)
    title = "KV waste vs block size (reserved + internal + external fragmentation)"
    ax.set_title(title + (f"\n{note}" if note else ""), fontsize="medium")
    return fig
