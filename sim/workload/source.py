"""Where a run's requests come from: a trace file or the built-in workload, through a loader.

The loader is passed in (``TraceLoader``): the ``traces`` package itself for a command-line
run, or a sweep worker's cache that parses each trace file once for many cells. Rate
scaling and the request limit are applied here, the same way for both.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

from sim.config import InputError, WorkloadConfig
from traces import Trace, limit, scale_rate


class TraceLoader(Protocol):
    """What loads traces: ``traces.load_trace`` and ``traces.default_workload``'s signatures
    (the ``traces`` module itself is one)."""

    def load_trace(self, path: str | Path, format: str | None = None, *,
                   seed: int = 0) -> Trace: ...

    def default_workload(self, seed: int = 0) -> Trace: ...


def load_input(workload: WorkloadConfig, loader: TraceLoader) -> tuple[Trace, str | None]:
    """The trace (or the default workload) after rate scaling and limit, and its sha256.

    Raises:
        InputError: the trace has no requests left to simulate (``traces`` errors pass).
    """
    if workload.trace is None:
        trace, sha = loader.default_workload(seed=workload.seed), None
    else:
        trace = loader.load_trace(workload.trace, workload.format, seed=workload.seed)
        sha = trace.metadata.sha256 or file_sha256(Path(workload.trace))
    if workload.rate_scale != 1.0:
        trace = scale_rate(trace, workload.rate_scale)
    if workload.limit is not None:
        trace = limit(trace, workload.limit)
    if len(trace) == 0:
        raise InputError(f"{workload.trace or 'workload'}: no requests to simulate")
    return trace, sha


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
