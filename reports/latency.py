"""Latency distributions: CDFs of TTFT, TPOT and normalised latency, a line per allocator.

Per finished request, with vLLM's benchmark definitions (as summary.json uses them):
TTFT = first token - arrival; TPOT = (end-to-end - TTFT) / (output tokens - 1), only for
requests with more than one output token; normalised latency = end-to-end / output tokens
(the paper's metric, s/token). The x axis turns logarithmic when values span decades.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from reports import schema as S
from reports.readers import RunResults
from reports.series import weighted_cdf
from reports.style import line_style, new_figure

PANELS = (
    ("ttft", "Time to first token (TTFT)", "TTFT (s)"),
    ("tpot", "Time per output token (TPOT)", "TPOT (s/token)"),
    ("norm", "Normalised latency", "End-to-end latency / output tokens (s/token)"),
)
EMPTY = {"ttft": "no finished requests", "tpot": "no finished request with 2+ output tokens",
         "norm": "no finished requests"}
LOG_SPAN = 30.0   # use a log x axis when max / min exceeds this


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
    """Three CDF panels (TTFT, TPOT, normalised latency), one line per allocator."""
    fig, axes = new_figure(1, len(PANELS), height=4.2, width=13.0, sharey=True)
    values = {n: request_latencies(run.requests_of(n)) for n in run.allocators}
    for ax, (key, title, xlabel) in zip(axes, PANELS):
        for index, name in enumerate(run.allocators):
            x, y = weighted_cdf(values[name][key])
            if len(x):
                ax.step(x, y, where="post", label=name, **line_style(name, index))
        _axis_scale(ax, [values[n][key] for n in run.allocators], EMPTY[key])
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("Share of finished requests at or below x")
    axes[0].set_ylim(0, 1.02)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6),
                   frameon=False, fontsize="small")
    fig.suptitle("Request latency distributions (CDF over finished requests)")
    return fig


def _axis_scale(ax: Axes, series: list[npt.NDArray[np.float64]], empty: str) -> None:
    values = np.concatenate([s[np.isfinite(s) & (s > 0)] for s in series] or [np.empty(0)])
    if not len(values):
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center")
        return
    if values.max() / values.min() > LOG_SPAN:
        ax.set_xscale("log")
