"""Prefix cache: hit rate per time bin and cumulative, for allocators with caching on.

Hit rate = prompt tokens served from the cache / prompt tokens looked up, re-admissions after
preemption included (a recomputed request finds its own blocks still cached), as vLLM's
prefix-cache statistics and the summary's ``prefix_hit_rate`` define it; that is why the
achieved rate can sit above the trace summary's ideal reuse (what an infinite cache would serve
to first admissions), and the figure says so. Bins without lookups are left empty. Nothing is
drawn (``plot_prefix_cache`` returns None, ``skip_reason`` says why) without prefix caching or
when the trace has no shared content at all.
"""
from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from reports import schema as S
from reports.readers import RunResults
from reports.series import bin_edges, bin_sums
from reports.style import allocator_color, new_figure, percent_axis

MAX_BINS = 100
LOOKUPS_PER_BIN = 8   # a bin's hit rate over fewer admissions is mostly noise
READMISSION_NOTE = ("Hits include re-admissions after preemption (a preempted request finds "
                    "its own blocks still cached),\nso the achieved rate can exceed the ideal "
                    "line, which counts first admissions only.")


def caching_allocators(run: RunResults) -> list[str]:
    """Allocators whose run had prefix caching on and looked something up."""
    return [n for n in run.allocators
            if run.caching(n) and float(run.steps_of(n)[S.PREFIX_QUERIES].sum()) > 0]


def shares_content(run: RunResults) -> bool:
    """False when the trace summary says no prompt can share a prefix with another."""
    reuse = run.trace_summary.get("prefix_reuse")
    method = reuse.get("method") if isinstance(reuse, dict) else None
    return not (isinstance(method, str) and method.startswith("none"))


def skip_reason(run: RunResults) -> str | None:
    """Why the figure is not drawn, or None when it is."""
    if not caching_allocators(run):
        return "prefix caching was off for every allocator"
    if not shares_content(run):
        return ("the trace has no shared content (no prompt can reuse another's prefix), so "
                "there is nothing for a prefix cache to find")
    return None


def _ideal_line(ax: Axes, run: RunResults) -> None:
    """The trace summary's ideal reuse (an infinite cache) as a reference line, if known."""
    reuse = run.trace_summary.get("prefix_reuse")
    fraction = reuse.get("fraction") if isinstance(reuse, dict) else None
    if isinstance(fraction, (int, float)):
        ax.axhline(100.0 * fraction, color="grey", linestyle=":", linewidth=1.4,
                   label=f"ideal, infinite cache ({100.0 * fraction:.1f}%)")


def _allocator_lines(binned: Axes, cumulative: Axes, run: RunResults, name: str) -> None:
    steps = run.steps_of(name)
    start = steps[S.TIME].to_numpy(np.float64)
    end = float(start[-1] + steps[S.DURATION].iloc[-1])
    hits = steps[S.PREFIX_HITS].to_numpy(np.float64)
    queries = steps[S.PREFIX_QUERIES].to_numpy(np.float64)
    num_bins = int(np.clip(np.count_nonzero(queries) // LOOKUPS_PER_BIN, 1, MAX_BINS))
    edges = bin_edges(start, end, num_bins)
    h, q = bin_sums(start, hits, edges), bin_sums(start, queries, edges)
    rate = np.divide(100.0 * h, q, out=np.full_like(h, np.nan), where=q > 0)
    color = allocator_color(name)
    binned.plot((edges[:-1] + edges[1:]) / 2, rate, color=color, marker=".", markersize=3,
                linewidth=1.0, label=name)
    total_q = np.cumsum(queries)
    running = np.divide(100.0 * np.cumsum(hits), total_q, out=np.full_like(total_q, np.nan),
                        where=total_q > 0)
    final = run.summary[name]["prefix_hit_rate"]
    ends = start + steps[S.DURATION].to_numpy(np.float64)
    cumulative.step(ends, running, where="post", color=color, linewidth=1.6,
                    label=f"{name} (final {100.0 * final:.1f}%)")
    cumulative.plot(ends[-1:], running[-1:], marker="o", color=color)


def plot_prefix_cache(run: RunResults) -> Figure | None:
    """Hit rate over time (binned) and cumulative, a line per caching allocator; None when
    ``skip_reason`` gives a reason."""
    if skip_reason(run) is not None:
        return None
    names = caching_allocators(run)
    fig, (binned, cumulative) = new_figure(2, 1, sharex=True, height=6.6)
    for name in names:
        _allocator_lines(binned, cumulative, run, name)
    binned.set_title(f"Per time bin (about {LOOKUPS_PER_BIN} or more admissions per bin)",
                     loc="left", fontsize="medium")
    cumulative.set_title("Cumulative since the start", loc="left", fontsize="medium")
    for ax in (binned, cumulative):
        ax.set_ylabel("Hit rate (% of prompt tokens)")
        ax.set_ylim(-2, 102)
        percent_axis(ax.yaxis)
        ax.grid(alpha=0.3)
    _ideal_line(cumulative, run)
    for ax in (binned, cumulative):
        ax.legend(loc="lower right", fontsize="small", framealpha=0.85)
    if not any(float(run.steps_of(n)[S.PREFIX_HITS].sum()) for n in names):
        binned.text(0.5, 0.5, "no prompt token was ever found in the cache",
                    transform=binned.transAxes, ha="center", fontsize="medium")
    steps = run.steps[run.steps[S.ALLOCATOR].isin(names)]
    start, end = float(steps[S.TIME].min()), float((steps[S.TIME] + steps[S.DURATION]).max())
    cumulative.set_xlim(start, end + 0.01 * max(end - start, 1e-9))
    cumulative.set_xlabel("Simulated time (s)")
    fig.suptitle("Prefix cache hit rate")
    fig.supxlabel(READMISSION_NOTE, fontsize="small", color="#444444")
    return fig
