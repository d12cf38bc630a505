"""One sweep cell: simulate.py's options in, the ordinary simulator run in its own directory.

A cell's values (snake_case option names, TOML values) are converted to the options' types
as the command line would read them, applied with ``dataclasses.replace`` to the default
``Options`` and resolved by ``sim.cli``'s own ``resolve``, so a cell is exactly ``simulate.py
ARGS --out CELL_DIR``. ``execute_cell`` is what a worker process runs: it captures the
simulator's output in ``cell.log`` and commits the directory with its marker
(sim/sweep/store.py). Each worker process keeps one ``TraceCache``, the trace loader its
cells are given: the trace is read and parsed once per worker, and every cell applies its
own rate scaling and limit to it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import socket
import time
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.cli import resolve, run_options
from sim.compare import ALL_REJECTED
from sim.config import OPTION_TYPES, InputError, OptionError, Options, flag
from sim.sweep.spec import value_text
from sim.sweep.store import CELL_FILE, ERROR_FILE, SCHEMA_VERSION, commit, make_temp, write_json
from sim.workload.source import load_input
from traces import Trace, TraceError, default_workload, load_trace
from traces.options import parse_columns

_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "int": int, "float": float, "str": str, "dict[str, str]": parse_columns,
    "tuple[str, ...]": lambda text: tuple(part for part in re.split(r"[;,\s]+", text) if part),
}
"""Text to value per option type; a list of texts (``--vllm-override``, ``--goodput``) is
separated by ';', ',' or spaces."""


class CellError(RuntimeError):
    """A cell could not run: bad options, unreadable input or a failed simulation."""


class TraceCache:
    """A trace loader (``sim.workload.source.TraceLoader``) that keeps the traces it loaded,
    keyed by everything that changes loading. Traces are immutable, so sharing one is safe."""

    def __init__(self, max_entries: int = 4) -> None:
        self.max_entries = max_entries
        self.num_loads = 0
        self._traces: OrderedDict[tuple[Any, ...], Trace] = OrderedDict()

    def load_trace(self, path: str | Path, format: str | None = None, **kwargs: Any) -> Trace:
        """``traces.load_trace`` through the cache (keyed by path, size, mtime, arguments)."""
        try:
            stat = Path(path).stat()
        except OSError:
            return load_trace(path, format, **kwargs)
        key = ("file", str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, format,
               repr(sorted(kwargs.items())))
        return self._get(key, lambda: load_trace(path, format, **kwargs))

    def default_workload(self, seed: int = 0) -> Trace:
        """``traces.default_workload`` through the cache."""
        return self._get(("default", seed), lambda: default_workload(seed))

    def _get(self, key: tuple[Any, ...], load: Callable[[], Trace]) -> Trace:
        if key in self._traces:
            self._traces.move_to_end(key)
            return self._traces[key]
        trace = load()
        self.num_loads += 1
        self._traces[key] = trace
        while len(self._traces) > self.max_entries:
            self._traces.popitem(last=False)
        return trace


# One cache per process: process pools and Ray both reuse a worker for many cells.
WORKER_CACHE = TraceCache()


def option_value(key: str, value: Any) -> Any:
    """A spec value as the command line would read it for option ``key`` (TOML gives ints
    for floats, lists for comma-separated text, ...).

    Raises:
        OptionError: an unknown name, a boolean for a valued option (or the reverse), or
            text the option's type cannot read.
    """
    kind = OPTION_TYPES.get(key)
    if kind is None:
        raise OptionError(key, f"{key}: not a simulate.py option")
    switch = kind in ("bool", "bool | None")  # None: the default decides (async, API path)
    if switch or isinstance(value, bool):
        if not switch:
            raise OptionError(key, f"{key}: expected a value, not {str(value).lower()}")
        if not isinstance(value, bool):
            raise OptionError(key, f"{key}: expected true or false, got {value!r}")
        return value
    text = value_text(value)
    name = kind.split(" | ")[0]
    try:
        return _CONVERTERS[name](text)
    except ValueError:
        raise OptionError(key, f"{flag(key)}: invalid {name} value: {text!r}") from None


def cell_options(values: dict[str, Any], out_dir: Path | str) -> Options:
    """The ``Options`` of a cell writing to ``out_dir``: the defaults with the cell's values,
    without a progress bar and with its allocators in this process (cells run in parallel)."""
    given = {key: option_value(key, value) for key, value in values.items()}
    return dataclasses.replace(Options(), **given, out=str(out_dir), progress=False, jobs=1)


def check_cell(values: dict[str, Any], cache: TraceCache) -> None:
    """Resolve a cell's configuration and load its trace without running it.

    Raises:
        OptionError: the options or inputs the simulator would refuse.
    """
    try:
        config = resolve(cell_options(values, "unused"))
        load_input(config.workload, cache)
    except OptionError:
        raise
    except (InputError, TraceError, OSError) as exc:
        raise OptionError(None, str(exc).splitlines()[0]) from None


def base_rate(values: dict[str, Any], cache: TraceCache) -> float | None:
    """Mean request rate (req/s) the cell's trace has at rate_scale 1 (after its limit)."""
    config = resolve(cell_options({**values, "rate_scale": 1.0}, "unused"))
    trace, _ = load_input(config.workload, cache)
    span = trace.metadata.span_s
    return (len(trace) - 1) / span if len(trace) > 1 and span > 0 else None


def run_cell(values: dict[str, Any], out_dir: Path, trace_cache: TraceCache) -> dict[str, Any]:
    """Run ``simulate.py OPTIONS --out out_dir``; returns the parsed summary.json. A run in
    which every allocator rejected every request is a finished cell (its latencies are null,
    so a capacity probe counts it as a miss).

    Raises:
        CellError: refused options, unreadable input, or a nonzero exit status.
    """
    try:
        status = run_options(cell_options(values, out_dir), trace_cache)
    except InputError as exc:
        raise CellError(str(exc)) from None
    if status not in (0, ALL_REJECTED):
        raise CellError(f"simulate.py exited with status {status}")
    with (out_dir / "summary.json").open(encoding="utf-8") as fh:
        summary: dict[str, Any] = json.load(fh)
    if status != 0 and not summary.get("all_rejected"):
        raise CellError(f"simulate.py exited with status {status}")
    return summary


CellRunner = Callable[[dict[str, Any], Path, TraceCache], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class CellTask:
    """What a worker needs to run one cell (picklable; ``runner`` is a module function)."""

    root: str
    name: str
    params: dict[str, Any]
    options: dict[str, Any]
    runner: CellRunner = field(default=run_cell)


def new_record(task: CellTask) -> dict[str, Any]:
    """The marker's common fields."""
    return {"schema_version": SCHEMA_VERSION, "name": task.name, "run_id": uuid.uuid4().hex,
            "params": task.params, "options": task.options}


def failed_record(task: CellTask, error: str, trace: str | None = None) -> dict[str, Any]:
    """A failed cell's marker."""
    return {**new_record(task), "status": "failed", "error": error, "traceback": trace}


def execute_cell(task: CellTask) -> dict[str, Any]:
    """Run one cell in a temporary directory, write its marker, commit it; return the marker.

    A failure of the cell (any exception, or the parser's SystemExit) is recorded in
    ``error.json`` with its message instead of being raised; the simulator's stdout and
    stderr go to ``cell.log``.
    """
    root = Path(task.root)
    tmp = make_temp(root, task.name)
    started = time.perf_counter()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            summary = task.runner(dict(task.options), tmp, WORKER_CACHE)
        record = {**new_record(task), "status": "ok", "summary": summary}
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any cell failure is recorded
        lines = err.getvalue().strip().splitlines()
        message = f"{type(exc).__name__}: {exc}" + (f" ({lines[-1]})" if lines else "")
        record = failed_record(task, message, traceback.format_exc())
    record["cell_wall_s"] = time.perf_counter() - started
    record["worker"] = {"host": socket.gethostname(), "pid": os.getpid(),
                        "trace_loads": WORKER_CACHE.num_loads}
    (tmp / "cell.log").write_text(out.getvalue() + err.getvalue(), encoding="utf-8")
    write_json(tmp / (CELL_FILE if record["status"] == "ok" else ERROR_FILE), record)
    commit(root, task.name, tmp)
    return record
