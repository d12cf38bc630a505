"""One sweep cell: simulate.py's options in, the ordinary simulator run in its own directory.

``run_cell`` turns option names (snake_case of simulate.py's flags) into simulate.py's argv,
parses it with ``sim.cli``'s own parser and runs ``sim.simulation.run_from_args``, so a cell
is exactly ``simulate.py ARGS --out CELL_DIR``. ``execute_cell`` is what a worker process
runs: it captures the simulator's output in ``cell.log`` and commits the directory with its
marker (sim/sweep_store.py). Each worker process keeps one ``TraceCache``: the trace is read
and parsed once per worker, and every cell applies its own rate scaling and limit to it.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import socket
import time
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.sweep.spec import value_text
from sim.sweep.store import CELL_FILE, ERROR_FILE, SCHEMA_VERSION, commit, make_temp, write_json

if TYPE_CHECKING:
    from traces import Trace


class CellError(RuntimeError):
    """A cell could not run: bad options, unreadable input or a failed simulation."""


class OptionError(ValueError):
    """An option the simulator refuses; ``key`` names it when known."""

    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(message)
        self.key = key


class TraceCache:
    """Traces loaded by this process, keyed by everything that changes loading.

    While ``installed()``, ``traces.load_trace`` and ``traces.default_workload`` answer from
    the cache, so the simulator's own loading code (and its rate scaling and limit, applied
    to the returned trace) runs unchanged. Traces are immutable, so sharing one is safe.
    """

    def __init__(self, max_entries: int = 4) -> None:
        self.max_entries = max_entries
        self.num_loads = 0
        self._traces: OrderedDict[tuple[Any, ...], Trace] = OrderedDict()

    def load_trace(self, path: str | Path, format: str | None = None, **kwargs: Any) -> Trace:
        """``traces.load_trace`` through the cache (keyed by path, size, mtime, arguments)."""
        from traces.loader import load_trace

        try:
            stat = Path(path).stat()
        except OSError:
            return load_trace(path, format, **kwargs)
        key = ("file", str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, format,
               repr(sorted(kwargs.items())))
        return self._get(key, lambda: load_trace(path, format, **kwargs))

    def default_workload(self, seed: int = 0) -> Trace:
        """``traces.default_workload`` through the cache."""
        from traces.synthetic import default_workload

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

    @contextlib.contextmanager
    def installed(self) -> Iterator[TraceCache]:
        """Route the simulator's trace loading through this cache for the block."""
        import traces

        saved = traces.load_trace, traces.default_workload
        traces.load_trace, traces.default_workload = self.load_trace, self.default_workload
        try:
            yield self
        finally:
            traces.load_trace, traces.default_workload = saved


# One cache per process: process pools and Ray both reuse a worker for many cells.
WORKER_CACHE = TraceCache()


@functools.lru_cache(maxsize=1)
def option_actions() -> dict[str, argparse.Action]:
    """simulate.py's options by destination name (from sim.cli's parser)."""
    from sim.cli import build_parser

    # argparse has no public list of actions; _actions is stable since Python 3.2.
    return {a.dest: a for a in build_parser()._actions if a.dest != "help"}


def to_argv(options: dict[str, Any], extra: Sequence[str] = ()) -> list[str]:
    """simulate.py's argv for ``options``, then ``extra``, then the trace (after "--").

    Raises:
        OptionError: an unknown name, or a boolean given to a valued option (or vice versa).
    """
    actions = option_actions()
    argv: list[str] = []
    positional: list[str] = []
    for key, value in options.items():
        action = actions.get(key)
        if action is None:
            raise OptionError(key, f"{key}: not a simulate.py option")
        flags = action.option_strings
        if not flags:
            positional.append(value_text(value))
        elif isinstance(action, argparse.BooleanOptionalAction) or action.nargs == 0:
            if not isinstance(value, bool):
                raise OptionError(key, f"{key}: expected true or false, got {value!r}")
            argv.extend(_flag(action, value))
        elif isinstance(value, bool):
            raise OptionError(key, f"{key}: expected a value, not {str(value).lower()}")
        else:
            argv.append(f"{flags[0]}={value_text(value)}")  # "=": values may start with "-"
    return argv + list(extra) + (["--", *positional] if positional else [])


def _flag(action: argparse.Action, value: bool) -> list[str]:
    if isinstance(action, argparse.BooleanOptionalAction):
        return [action.option_strings[0] if value else action.option_strings[1]]
    return [action.option_strings[0]] if value != action.default else []


def parse_argv(argv: list[str]) -> argparse.Namespace:
    """Parse with simulate.py's parser; its one-line error becomes an OptionError."""
    from sim.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit:
        message = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else ""
        message = message.split("error: ", 1)[-1]
        key = next((dest for dest, a in option_actions().items()
                    if any(f in message.split() or f"{f}:" in message.split()
                           for f in a.option_strings)), None)
        raise OptionError(key, message or f"bad options {argv}") from None


def cell_args(options: dict[str, Any], out_dir: Path | str) -> argparse.Namespace:
    """Parsed simulate.py options for a cell writing to ``out_dir``, without a progress bar."""
    return parse_argv(to_argv(options, ["--out", str(out_dir), "--no-progress"]))


def check_cell(options: dict[str, Any], cache: TraceCache) -> None:
    """Resolve a cell's configuration (and load its trace) without running it.

    Raises:
        OptionError: the options or inputs the simulator would refuse.
    """
    from sim.simulation import InputError, resolve

    args = cell_args(options, "unused")
    try:
        with cache.installed():
            resolve(args)
    except InputError as exc:
        raise OptionError(None, str(exc)) from None


def base_rate(options: dict[str, Any], cache: TraceCache) -> float | None:
    """Mean request rate (req/s) the cell's trace has at rate_scale 1 (after its limit)."""
    from sim.simulation import load_input

    args = cell_args({**options, "rate_scale": 1.0}, "unused")
    with cache.installed():
        trace, _ = load_input(args)
    span = trace.metadata.span_s
    return (len(trace) - 1) / span if len(trace) > 1 and span > 0 else None


def run_cell(options: dict[str, Any], out_dir: Path, trace_cache: TraceCache) -> dict[str, Any]:
    """Run ``simulate.py OPTIONS --out out_dir``; returns the parsed summary.json.

    Raises:
        CellError: refused options, unreadable input, or a nonzero exit status.
    """
    import json

    from sim.simulation import InputError, run_from_args

    try:
        args = cell_args(options, out_dir)
        with trace_cache.installed():
            status = run_from_args(args)
    except (OptionError, InputError) as exc:
        raise CellError(str(exc)) from None
    if status != 0:
        raise CellError(f"simulate.py exited with status {status}")
    with (out_dir / "summary.json").open(encoding="utf-8") as fh:
        summary: dict[str, Any] = json.load(fh)
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
