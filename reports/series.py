"""Numeric helpers behind the plots: time resampling and empirical CDFs.

A full trace has ~10^5-10^6 steps per allocator, far more points than a figure can show, so
time series are resampled into at most a few hundred bins. Each step's snapshot holds from the
step's start until the next step starts (the last one until the run ends), i.e. memory and
batch are piecewise constant in time; a bin's value is the exact time average of that step
function, computed from its running integral (no step is dropped, however short).
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
MAX_BINS = 600
MAX_CDF_POINTS = 1000


def bin_edges(start: FloatArray, end: float, max_bins: int = MAX_BINS) -> FloatArray:
    """Edges of at most ``max_bins`` equal time bins covering ``[start[0], end]``."""
    t0 = float(start[0])
    end = max(end, t0 + 1e-9)
    return np.linspace(t0, end, min(max_bins, max(len(start), 1)) + 1)


def time_average(start: FloatArray, end: float, values: FloatArray,
                 edges: FloatArray) -> FloatArray:
    """Time average of a piecewise-constant series over each bin.

    Args:
        start: times at which each value begins to hold (non-decreasing).
        end: time at which the last value stops holding.
        values: the value from ``start[i]`` to ``start[i + 1]``.
        edges: bin edges (from ``bin_edges``).

    Returns:
        one average per bin.
    """
    knots = np.append(start, max(end, float(start[-1])))
    widths = np.diff(knots)
    integral = np.concatenate([[0.0], np.cumsum(values * widths)])
    at_edges = np.interp(edges, knots, integral)
    spans = np.diff(edges)
    out = np.diff(at_edges) / np.where(spans > 0, spans, 1.0)
    return np.asarray(out, dtype=np.float64)


def bin_sums(start: FloatArray, values: FloatArray, edges: FloatArray) -> FloatArray:
    """Sum of the events (``values`` at times ``start``) falling in each bin."""
    index = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, len(edges) - 2)
    return np.bincount(index, weights=values, minlength=len(edges) - 1).astype(np.float64)


def weighted_cdf(values: FloatArray, weights: FloatArray | None = None,
                 max_points: int = MAX_CDF_POINTS) -> tuple[FloatArray, FloatArray]:
    """Empirical CDF as (x, F(x)) step points, thinned to about ``max_points``.

    Args:
        values: samples (NaN ignored).
        weights: optional non-negative weight per sample (e.g. step durations); samples of
            zero total weight are weighted equally instead.
        max_points: thinning target; the first and last points are always kept.
    """
    values = np.asarray(values, dtype=np.float64)
    w = np.ones_like(values) if weights is None else np.asarray(weights, dtype=np.float64)
    keep = ~np.isnan(values)
    values, w = values[keep], w[keep]
    if not len(values):
        return np.empty(0), np.empty(0)
    if w.sum() <= 0:
        w = np.ones_like(values)
    order = np.argsort(values, kind="stable")
    x, cum = values[order], np.cumsum(w[order])
    y = cum / cum[-1]
    last = np.append(x[1:] != x[:-1], True)
    x, y = x[last], y[last]
    if len(x) > max_points:
        pick = np.unique(np.linspace(0, len(x) - 1, max_points).round().astype(np.int64))
        x, y = x[pick], y[pick]
    return np.concatenate([[x[0]], x]), np.concatenate([[0.0], y])
