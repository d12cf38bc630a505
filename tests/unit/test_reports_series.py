"""Tests of reports/series.py: exact time averages, bin sums and weighted CDFs."""
from __future__ import annotations

import numpy as np
import pytest

from reports.series import bin_edges, bin_sums, time_average, weighted_cdf


def test_time_average_is_exact_for_a_step_function() -> None:
    """Values holding 0-1 s (2), 1-3 s (4), 3-4 s (10) average to 3 and 7 over two 2 s bins."""
    start = np.array([0.0, 1.0, 3.0])
    values = np.array([2.0, 4.0, 10.0])
    edges = np.array([0.0, 2.0, 4.0])
    assert time_average(start, 4.0, values, edges) == pytest.approx([3.0, 7.0])


def test_time_average_of_one_step_is_its_value() -> None:
    """A single step gives its own value in every bin."""
    start = np.array([5.0])
    edges = bin_edges(start, 5.5)
    assert len(edges) == 2
    assert time_average(start, 5.5, np.array([42.0]), edges) == pytest.approx([42.0])


def test_bin_edges_are_capped() -> None:
    """Many steps give at most max_bins bins covering first start to end."""
    start = np.linspace(0.0, 10.0, 5000)
    edges = bin_edges(start, 11.0, max_bins=100)
    assert len(edges) == 101 and edges[0] == 0.0 and edges[-1] == 11.0


def test_bin_sums_put_events_in_their_bins() -> None:
    """Events at 0.5, 1.5, 1.7 and 2.0 (the last edge) sum per bin."""
    edges = np.array([0.0, 1.0, 2.0])
    sums = bin_sums(np.array([0.5, 1.5, 1.7, 2.0]), np.array([1.0, 2.0, 3.0, 4.0]), edges)
    assert sums.tolist() == [1.0, 9.0]


def test_weighted_cdf_uses_weights() -> None:
    """Value 1 weighted 3 and value 2 weighted 1 give F(1) = 0.75, F(2) = 1."""
    x, y = weighted_cdf(np.array([2.0, 1.0]), np.array([1.0, 3.0]))
    assert x.tolist() == [1.0, 1.0, 2.0]
    assert y == pytest.approx([0.0, 0.75, 1.0])


def test_weighted_cdf_thins_and_ignores_nan() -> None:
    """A large sample is thinned to about max_points and still ends at F = 1; NaN is skipped."""
    values = np.append(np.arange(10_000, dtype=float), np.nan)
    x, y = weighted_cdf(values, max_points=50)
    assert len(x) <= 52 and y[-1] == pytest.approx(1.0) and x[-1] == 9999.0
    assert np.all(np.diff(y) >= 0)
