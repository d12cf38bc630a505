"""Where a run's requests come from: a trace file or the built-in workload, through a loader.

The loader is passed in (``TraceLoader``): the ``traces`` package itself for a command-line
run, or a sweep worker's cache that parses each trace file once for many cells. Rate
scaling and the request limit are applied here, the same way for both. A run given any of
vllm bench serve's workload options (a dataset, --request-rate, --tokenizer, --columns, ...)
loads through ``traces.load_workload`` instead, which applies all of them.
"""
from __future__ import annotations

import hashlib
from dataclasses import fields
from pathlib import Path
from typing import Protocol

from sim.config import InputError, WorkloadConfig
from traces import Trace, limit, load_workload, scale_rate
from traces.workload import WorkloadSpec, check_spec, source_path

PLAIN_FIELDS = ("trace", "format", "limit", "rate_scale", "seed")
"""Workload fields every run has had; a spec that sets only these loads the old way."""


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
    spec = workload.spec
    if spec is not None:
        check_spec(spec)
        if not _plain(spec):
            trace = load_workload(spec)
            path = source_path(spec)
            sha = trace.metadata.sha256 or (file_sha256(Path(path)) if path else None)
            return _nonempty(trace, workload), sha
    if workload.trace is None:
        trace, sha = loader.default_workload(seed=workload.seed), None
    else:
        trace = loader.load_trace(workload.trace, workload.format, seed=workload.seed)
        sha = trace.metadata.sha256 or file_sha256(Path(workload.trace))
    if workload.rate_scale != 1.0:
        trace = scale_rate(trace, workload.rate_scale)
    if workload.limit is not None:
        trace = limit(trace, workload.limit)
    return _nonempty(trace, workload), sha


def _plain(spec: WorkloadSpec) -> bool:
    """Only the trace, format, limit, rate scale and seed are set (the sweep's options)."""
    default = WorkloadSpec()
    return all(getattr(spec, f.name) == getattr(default, f.name) for f in fields(WorkloadSpec)
               if f.name not in PLAIN_FIELDS)


def _nonempty(trace: Trace, workload: WorkloadConfig) -> Trace:
    if len(trace) == 0:
        raise InputError(f"{workload.trace or 'workload'}: no requests to simulate")
    return trace


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
