"""Where cells run: a local process pool (default) or tasks on a Ray cluster.

Both backends keep their workers for the whole sweep (a capacity search submits several
rounds), so a worker's trace cache survives from one cell to the next. ``run`` yields each
cell's marker as it completes, in completion order; the caller restores the cell order.
Ray is optional (``pip install pagedsim[ray]``) and imported only when asked for.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from sim.sweep.cell import CellTask, failed_record

CellFn = Callable[[CellTask], dict[str, Any]]


class BackendError(RuntimeError):
    """A backend cannot start (Ray missing or unreachable)."""


def default_workers(num_cells: int) -> int:
    """min(CPU count, cells), at least 1."""
    return max(1, min(os.cpu_count() or 1, num_cells))


class LocalBackend:
    """A ``concurrent.futures`` process pool of ``workers`` processes.

    A worker that dies (killed, out of memory) breaks the pool: ``run`` then raises
    ``concurrent.futures.process.BrokenProcessPool`` and the sweep stops; cells finished
    so far are on disk and a re-run resumes from them.
    """

    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Self:
        self._pool = ProcessPoolExecutor(max_workers=self.workers)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=exc is None, cancel_futures=True)
            self._pool = None

    def run(self, fn: CellFn, tasks: list[CellTask]) -> Iterator[dict[str, Any]]:
        """Submit every task; yield each result as it completes."""
        if self._pool is None:
            raise RuntimeError("LocalBackend.run outside its with-block")
        futures = [self._pool.submit(fn, task) for task in tasks]
        for future in as_completed(futures):
            yield future.result()


def import_ray() -> Any:
    """The ray module, or BackendError naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise BackendError("--ray needs the ray package: pip install 'pagedsim[ray]'") from None
    return ray


class RayBackend:
    """One Ray task (1 CPU) per cell, on the cluster at ``address`` or a local instance.

    A local instance gets ``num_cpus`` CPUs (all when None) and is shut down at the end; an
    existing connection (``ray.is_initialized()``) is used as is. Every node must have
    pagedsim installed, and the sweep directory must be on a filesystem all nodes share:
    markers of cells whose directory the driver cannot see are written again by the driver
    (sim/sweep/store.py ``save_record``), but their other result files stay on the node.
    A task that fails inside Ray itself (a worker crash, after Ray's retries) is recorded
    as a failed cell.
    """

    name = "ray"

    def __init__(self, address: str | None, num_cpus: int | None = None) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self._ray: Any = None
        self._owned = False

    def __enter__(self) -> Self:
        ray = import_ray()
        if not ray.is_initialized():
            try:
                self._init(ray)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise BackendError(f"--ray {self.address or ''}: cannot start or reach "
                                   f"Ray ({str(exc).splitlines()[0]})") from None
            self._owned = True
        self._ray = ray
        return self

    def _init(self, ray: Any) -> None:
        if self.address:
            ray.init(address=self.address, log_to_driver=False)
            return
        # Workers of a local instance inherit the environment ray.init starts it with; put
        # this copy of pagedsim on their path (a checkout need not be installed). A
        # runtime_env would do the same but costs seconds per worker start.
        saved = os.environ.get("PYTHONPATH")
        root = str(Path(__file__).resolve().parents[2])
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, saved) if p)
        try:
            ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False)
        finally:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._owned and self._ray is not None:
            self._ray.shutdown()
        self._owned = False

    def run(self, fn: CellFn, tasks: list[CellTask]) -> Iterator[dict[str, Any]]:
        """Submit one task per cell; yield each result as it completes."""
        ray = self._ray
        remote = ray.remote(num_cpus=1)(fn)
        pending = {remote.remote(task): task for task in tasks}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                task = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except ray.exceptions.RayError as exc:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    yield failed_record(task, f"{type(exc).__name__}: {first}")
