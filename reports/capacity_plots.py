"""Capacity-search figures: every probe against the SLO, and the capacities side by side.

``plot_capacity_probes`` draws, per point of the other axes, each allocator's probes (the
metric, in ms/token for a latency, against the probed request rate on a log axis, since
bracketing doubles the rate) with the SLO and each found capacity as a dotted line; every probe
is shown (the y axis covers them all, turning logarithmic when they span decades) and a probe
with no finished request (a miss) sits on the top edge as a cross. ``plot_capacity_bars`` shows
each allocator's capacity in req/s; a capacity that is only a bound is hatched and marked
">=" (above the largest rate tried) or "<" (below the smallest). Titles name trace, model, GPU.
"""
from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from reports import schema as S
from reports.capacity import CapacityResults, point_label, request_rate
from reports.merge import context_line
from reports.style import allocator_color, line_style, new_figure, plain_log_ticks

LOG_SPAN = 30.0


def metric_scale(metric: str) -> tuple[float, str]:
    """Factor and label of the metric as shown: latencies (kind time) in ms."""
    label, unit, kind = S.SUMMARY_KEYS.get(metric, (metric, "", "auto"))
    if kind == "time":
        return 1000.0, f"{label} ({'ms/token' if unit == 's/token' else 'ms'})"
    return 1.0, f"{label} ({unit})" if unit else label


def _probe_panel(ax: Axes, results: CapacityResults, point: str) -> int:
    """Draw one point's probes; returns the number of misses drawn."""
    factor, ylabel = metric_scale(results.metric)
    searches = [s for s in results.searches if point_label(s, results.axes) == point]
    values: list[float] = []
    rates: list[float] = []
    misses: list[tuple[float, str]] = []
    for index, search in enumerate(searches):
        name = str(search["allocator"])
        pairs = sorted((float(r), v) for r, v in search["probes"])
        x = [request_rate(search, r) or r for r, _ in pairs]
        y = [np.nan if v is None else factor * float(v) for _, v in pairs]
        ax.plot(x, y, marker="o", markersize=4, label=name, **line_style(name, index))
        values += [v for v in y if np.isfinite(v)]
        rates += x
        misses += [(xi, name) for xi, (_, v) in zip(x, pairs) if v is None]
        cap = search.get("capacity_rate_scale")
        if search.get("status") == "ok" and isinstance(cap, (int, float)):
            ax.axvline(request_rate(search, float(cap)) or float(cap),
                       color=allocator_color(name), linestyle=":", linewidth=1.4)
    slo = factor * results.slo
    ax.axhline(slo, color="grey", linestyle="--", linewidth=1.0)
    _y_axis(ax, values + [slo])
    for xi, name in misses:
        ax.plot([xi], [ax.get_ylim()[1]], marker="X", markersize=8, color=allocator_color(name),
                markeredgecolor="black", clip_on=False, linestyle="none", zorder=20)
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis, max(rates) / min(rates) if rates else 10.0)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="major")
    ax.set_title(point or "all probes", loc="left", fontsize="medium")
    return len(misses)


def _y_axis(ax: Axes, values: list[float]) -> None:
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > LOG_SPAN:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) / 1.3, max(positive) * 1.3)
    else:
        ax.set_ylim(0, max(values) * 1.1 if values else 1.0)


def plot_capacity_probes(results: CapacityResults) -> Figure:
    """The probes of every search, one panel per point of the other axes."""
    points = results.points()
    fig, axes = new_figure(len(points), 1, height=max(4.4, 3.4 * len(points) + 1.0),
                           width=9.5, sharex=True)
    misses = sum(_probe_panel(ax, results, point) for ax, point in zip(axes, points))
    rated = any(request_rate(s, 1.0) is not None for s in results.searches)
    axes[-1].set_xlabel("Probed request rate (req/s, log scale)" if rated
                        else "Probed rate scale (x the trace's rate, log scale)")
    factor, _ = metric_scale(results.metric)
    handles, labels = axes[0].get_legend_handles_labels()
    extra = [Line2D([], [], color="grey", linestyle="--",
                    label=f"SLO {factor * results.slo:g}"
                          f"{' ms/token' if factor == 1000.0 else ''}"),
             Line2D([], [], color="grey", linestyle=":", label="capacity found")]
    if misses:
        extra.append(Line2D([], [], color="grey", marker="X", linestyle="none",
                            markeredgecolor="black",
                            label="probe without a finished request (a miss)"))
    fig.legend(handles + extra, labels + [h.get_label() for h in extra],
               loc="outside lower center", ncols=min(len(labels) + 3, 6), frameon=False,
               fontsize="small")
    fig.suptitle(f"Capacity search: every probe against the SLO\n{context_line(results.context)}")
    return fig


def plot_capacity_bars(results: CapacityResults) -> Figure:
    """Each allocator's capacity (req/s, else rate scale), grouped by axis point; bounds
    hatched and marked, failures named."""
    points = results.points()
    names = list(dict.fromkeys(str(s["allocator"]) for s in results.searches))
    fig, (ax,) = new_figure(1, 1, height=4.8, width=max(7.0, 1.2 * len(points) * len(names) + 3))
    width = 0.8 / max(len(names), 1)
    rated = all(request_rate(s, 1.0) is not None for s in results.searches)
    heights = []
    for index, search in enumerate(results.searches):
        group = points.index(point_label(search, results.axes))
        slot = names.index(str(search["allocator"]))
        x = group + (slot - (len(names) - 1) / 2) * width
        heights.append(_capacity_bar(ax, search, x, width, rated, index))
    ax.set_xticks(range(len(points)), [p or "" for p in points])
    ax.set_xlim(-0.6, len(points) - 0.4)
    shown = [h for h in heights if h > 0]
    log = bool(shown) and max(shown) / min(shown) > LOG_SPAN
    if log:   # capacities decades apart: a linear axis would hide the small ones
        ax.set_yscale("log")
        ax.set_ylim(min(shown) / 2, max(shown) * 2.5)
        plain_log_ticks(ax.yaxis, max(shown) / min(shown))
    else:
        ax.set_ylim(0, max(shown) * 1.18 if shown else 1.0)
    unit = "req/s" if rated else "rate scale"
    ax.set_ylabel(f"Capacity ({unit}{', log scale' if log else ''})")
    handles = [Line2D([], [], color=allocator_color(n), linewidth=8, label=n) for n in names]
    ax.legend(handles=handles, loc="upper right", fontsize="small", framealpha=0.9)
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Capacity per allocator (hatched: a bound, the search hit its rate limit)\n"
                 f"{context_line(results.context)}", fontsize="medium")
    return fig


def _capacity_bar(ax: Axes, search: dict[str, object], x: float, width: float, rated: bool,
                  index: int) -> float:
    """One bar with its value printed; returns its height."""
    name, status = str(search["allocator"]), search.get("status")
    scale = search.get("capacity_rate_scale")
    if status == "failed" or not isinstance(scale, (int, float)):
        text = "failed" if status == "failed" else "< smallest rate"
        ax.text(x, 0, text, rotation=90, ha="center", va="bottom", fontsize="small")
        return 0.0
    height = (request_rate(search, float(scale)) or float(scale)) if rated else float(scale)
    bound = status != "ok"
    ax.bar(x, height, width * 0.92, color=allocator_color(name), hatch="//" if bound else None,
           edgecolor="black" if bound else "white", zorder=3 + index)
    value = f"{height:,.0f}" if height >= 100 else f"{height:.3g}"
    ax.text(x, height, f"{'>= ' if bound else ''}{value}", ha="center", va="bottom",
            fontsize="small")
    return height
