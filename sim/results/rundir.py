"""Where a run's results go: the target directory, checked before anything is simulated, and
the staging directory the run writes into.

The target is ``--out``, else ``results/<trace>`` (``results/<trace>-<timestamp>`` when that
exists). It must not be a file and its nearest existing parent must be a writable directory;
an explicit ``--out`` that exists and is not empty is refused unless ``--overwrite``. A run
writes every file into a fresh ``.<name>.tmp-XXXX`` directory beside the target, and
``Staging.commit`` renames it into place, so a directory never mixes the files of two runs.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from sim.config import OptionError


def default_dir(source: str | None) -> Path:
    """``results/<stem>`` of the workload's source (a trace or dataset file, or a dataset
    name); ``results/default`` for the built-in workload."""
    return Path("results") / (Path(source).name.split(".")[0] if source else "default")


def default_target(trace: str | None, now: float | None = None) -> Path:
    """``default_dir(trace)``, or the same name with ``-<timestamp>`` (and ``-2``, ``-3``,
    ... on a clash) when it exists."""
    base = default_dir(trace)
    if not os.path.lexists(base):
        return base
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    candidate, k = base.with_name(f"{base.name}-{stamp}"), 2
    while os.path.lexists(candidate):
        candidate, k = base.with_name(f"{base.name}-{stamp}-{k}"), k + 1
    return candidate


def target_dir(out: str | None, trace: str | None, overwrite: bool) -> Path:
    """The run's results directory, checked (raises OptionError, one line naming --out)."""
    target = Path(out) if out else default_target(trace)
    if Path.cwd().is_relative_to(target.resolve()):
        raise OptionError("out", f"--out {out}: holds the current directory; choose a "
                                 "directory of its own")
    if os.path.lexists(target):
        if not target.is_dir():
            raise OptionError("out", f"--out {target}: exists and is not a directory")
        if out and not overwrite and any(target.iterdir()):
            raise OptionError("out", f"--out {target}: exists and is not empty (add "
                                     "--overwrite to replace it, or choose another directory)")
    parent = target.absolute().parent
    while not os.path.lexists(parent):
        parent = parent.parent
    if not parent.is_dir():
        raise OptionError("out", f"--out {target}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OptionError("out", f"--out {target}: {parent} is not writable")
    return target


@contextmanager
def _sigint_to(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """SIGINT goes to `handler` in the body, and back to its previous handler after; where
    no handler can be set (not the main thread: signals go elsewhere) the body runs as is."""
    try:
        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, handler)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) while the body writes or renames; raise it after."""
    caught: list[int] = []
    with _sigint_to(lambda signum, frame: caught.append(signum)):
        yield
    if caught:
        raise KeyboardInterrupt


@contextmanager
def sticky_interrupt() -> Iterator[Callable[[], None]]:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt where the program is, as by default, and is
    also remembered: the yielded check raises it again. CPython drops an exception raised in
    a finaliser (it prints "Exception ignored in" and goes on), so an interrupt landing in
    one would otherwise be lost and the run would go on to its end; the replay calls the
    check as each request leaves."""
    caught: list[int] = []

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)
        raise KeyboardInterrupt

    def check() -> None:
        if caught:
            raise KeyboardInterrupt

    with _sigint_to(on_interrupt):
        yield check


class Staging:
    """The temporary directory a run writes into, beside its ``target``."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.path: Path | None = None

    def open(self) -> Path:
        """Create the temporary directory (once); an OS refusal is an OptionError."""
        if self.path is None:
            parent = self.target.parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
                self.path = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.tmp-",
                                                  dir=parent))
            except OSError as exc:
                raise OptionError("out", f"--out {self.target}: cannot create a directory "
                                         f"in {parent} ({exc.strerror or exc})") from None
        return self.path

    def written(self) -> bool:
        """Whether the run wrote its results (summary.json) into the temporary directory."""
        return self.path is not None and (self.path / "summary.json").is_file()

    def commit(self) -> Path:
        """Rename the temporary directory to the target (an old target is removed after)."""
        assert self.path is not None
        with deferred_interrupt():
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(self.path, 0o777 & ~mask)
            old = None
            if os.path.lexists(self.target) and any(self.target.iterdir()):
                old = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.old-",
                                            dir=self.target.parent))
                os.replace(self.target, old / self.target.name)
            os.replace(self.path, self.target)
            self.path = None
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        return self.target

    def discard(self) -> None:
        """Remove the temporary directory and what it holds."""
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
