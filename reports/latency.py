"""Latency distributions: CDFs of TTFT, TPOT and normalised latency, a line per allocator.

Per finished request, with vLLM's benchmark definitions (as summary.json uses them), in
milliseconds as vllm bench serve prints them: TTFT = first token - arrival; TPOT =
(end-to-end - TTFT) / (output tokens - 1), only for requests with more than one output token;
normalised latency = end-to-end / output tokens (the paper's metric, ms/token). Each curve
carries a dot at its median (p50) and a diamond at its p99 (numpy's linear-interpolated
percentiles, as vLLM computes them). The x axis turns logarithmic when values span decades,
with ticks written as plain numbers (1-2-5 or 1-3 per decade while they fit, else per decade).
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from reports import schema as S
from reports.readers import RunResults
from reports.series import weighted_cdf
from reports.style import allocator_color, line_style, new_figure, plain_log_ticks

PANELS = (
    ("ttft", "Time to first token (TTFT)", "TTFT (ms)"),
    ("tpot", "Time per output token (TPOT)", "TPOT (ms/token)"),
    ("norm", "Normalised latency", "End-to-end latency / output tokens (ms/token)"),
)
EMPTY = {"ttft": "no finished requests", "tpot": "no finished request with 2+ output tokens",
         "norm": "no finished requests"}
LOG_SPAN = 30.0   # use a log x axis when max / min exceeds this
MARKERS = ((50.0, "o", "p50"), (99.0, "D", "p99"))


def request_latencies(requests: pd.DataFrame) -> dict[str, npt.NDArray[np.float64]]:
    """TTFT, TPOT and normalised latency (s) of the finished requests."""
    done = requests[requests[S.STATUS] == S.FINISHED]
    arrival = done[S.ARRIVAL].to_numpy(np.float64)
    first = done[S.FIRST_TOKEN].to_numpy(np.float64)
    finish = done[S.FINISH].to_numpy(np.float64)
    output = done[S.OUTPUT_TOKENS].to_numpy(np.float64)
    ttft, e2e = first - arrival, finish - arrival
    multi = output > 1
    return {
        "ttft": ttft,
        "tpot": (e2e[multi] - ttft[multi]) / (output[multi] - 1),
        "norm": e2e[output > 0] / output[output > 0],
    }


def plot_latency_cdfs(run: RunResults) -> Figure:
    """Three CDF panels (TTFT, TPOT, normalised latency) in ms, a line per allocator, its
    p50 and p99 marked."""
    fig, axes = new_figure(1, len(PANELS), height=4.4, width=13.0, sharey=True)
    values = {n: {k: 1000.0 * v for k, v in request_latencies(run.requests_of(n)).items()}
              for n in run.allocators}
    for ax, (key, title, xlabel) in zip(axes, PANELS):
        for index, name in enumerate(run.allocators):
            _cdf_with_marks(ax, name, index, values[name][key])
        _axis_scale(ax, [values[n][key] for n in run.allocators], EMPTY[key])
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3, which="major")
    axes[0].set_ylabel("Share of finished requests at or below x")
    axes[0].set_ylim(0, 1.02)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        marks = [Line2D([], [], color="grey", marker=m, linestyle="none", markeredgecolor="black",
                        label=f"{label} of each curve") for _, m, label in MARKERS]
        fig.legend(handles + marks, labels + [h.get_label() for h in marks],
                   loc="outside lower center", ncols=min(len(labels) + 2, 8), frameon=False,
                   fontsize="small")
    fig.suptitle("Request latency distributions (CDF over finished requests, ms)")
    return fig


def _cdf_with_marks(ax: Axes, name: str, index: int, values: npt.NDArray[np.float64]) -> None:
    x, y = weighted_cdf(values)
    if not len(x):
        return
    ax.step(x, y, where="post", label=name, **line_style(name, index))
    finite = values[np.isfinite(values)]
    for pct, marker, label in MARKERS:
        ax.plot([float(np.percentile(finite, pct))], [pct / 100.0], marker=marker,
                linestyle="none", color=allocator_color(name), markeredgecolor="black",
                markersize=5, zorder=10 + index, label=f"_{label} {name}")


def _axis_scale(ax: Axes, series: list[npt.NDArray[np.float64]], empty: str) -> None:
    values = np.concatenate([s[np.isfinite(s) & (s > 0)] for s in series] or [np.empty(0)])
    if not len(values):
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center")
        return
    span = values.max() / values.min()
    if span > LOG_SPAN:
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis, span)
    else:
        ax.ticklabel_format(axis="x", style="plain", useOffset=False)
