"""sim/workload/source.py: the trace comes from the loader given, then rate scale and limit."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim.config import InputError, WorkloadConfig
from sim.workload.source import file_sha256, load_input
from tests.unit.simkit import make_trace
from traces import Trace

ROWS = [(0.0, 10, 2), (1.0, 10, 2), (2.0, 10, 2), (4.0, 10, 2)]


class CountingLoader:
    """A loader that hands out one in-memory trace and counts the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def load_trace(self, path: str | Path, format: str | None = None, **kwargs: Any) -> Trace:
        self.calls.append((str(path), format, kwargs.get("seed")))
        return make_trace(ROWS)

    def default_workload(self, seed: int = 0) -> Trace:
        self.calls.append(("default", seed))
        return make_trace(ROWS[:2])


def test_the_loader_given_is_used_then_scale_and_limit(tmp_path: Path) -> None:
    """The trace file goes through the loader with the seed; rate x2 halves the arrival
    times and the limit keeps the first rows; the sha256 is the file's."""
    path = tmp_path / "t.csv"
    path.write_text("anything")
    loader = CountingLoader()
    trace, sha = load_input(WorkloadConfig(str(path), "azure", 2.0, 3, seed=7), loader)
    assert loader.calls == [(str(path), "azure", 7)]
    assert trace.arrival_s.tolist() == [0.0, 0.5, 1.0]
    assert sha == file_sha256(path)


def test_no_trace_is_the_default_workload_and_an_empty_one_is_refused() -> None:
    """Without a trace the loader's default workload is used (no sha256); nothing left to
    simulate is one clear error."""
    loader = CountingLoader()
    trace, sha = load_input(WorkloadConfig(seed=3), loader)
    assert len(trace) == 2 and sha is None and loader.calls == [("default", 3)]
    with pytest.raises(InputError, match="no requests"):
        load_input(WorkloadConfig(rate_scale=1.0, limit=None, trace=None),
                   type("Empty", (CountingLoader,), {
                       "default_workload": lambda self, seed=0: make_trace([])})())
