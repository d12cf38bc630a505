"""Token ids and fast block hashes of trace rows, prepared ahead in a helper process.

A replay derives every derived row's tokens (``traces.tokens.derive_token_runs``) and hashes
its blocks (``FastBlockHasher.hash_runs``): about a tenth of a run's work, and pure. The
simulation itself is one Python thread, so this work goes to one helper process that runs
windows of rows ahead of admission, using the machine's second core.

The helper is a plain ``python -c`` child (not ``multiprocessing``, whose spawn would re-run
the caller's unguarded ``__main__`` script in the child) that reads pickled jobs on stdin and
writes pickled results on stdout, started once per interpreter and shared by every run; a
reader thread files the results by job id. A window the helper has not delivered yet is
computed in place instead, so results never depend on timing, and any failure of the helper
only costs speed. ``PAGEDSIM_HELPER=0`` turns it off.
"""
from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import numpy.typing as npt

from sim.workload.block_hash import FastBlockHasher
from traces.tokens import derive_token_runs

LOOKAHEAD = 4
"""Windows submitted to the helper ahead of the one being admitted."""

_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the ``sim`` package


class Prepared(NamedTuple):
    """One window: run r's tokens are ``tokens[offsets[r]:offsets[r + 1]]`` and, with a
    block size, its block hashes are ``hashes[block_offsets[r]:block_offsets[r + 1]]``
    (rows of two uint64 lanes; ``view("V16")`` gives ``FastBlockHasher``'s bytes)."""

    tokens: npt.NDArray[np.int32]
    offsets: npt.NDArray[np.int64]
    hashes: npt.NDArray[np.uint64] | None
    block_offsets: npt.NDArray[np.int64] | None


def prepare_rows(seed: int, keys: list[str], lengths: list[int], vocab_size: int,
                 block_size: int | None) -> Prepared:
    """Tokens of the runs ``keys`` / ``lengths`` and, given ``block_size``, their fast hashes."""
    tokens, offsets = derive_token_runs(seed, keys, lengths, vocab_size)
    if block_size is None:
        return Prepared(tokens, offsets, None, None)
    hashes, block_offsets = FastBlockHasher(block_size).hash_runs_array(tokens, offsets)
    return Prepared(tokens, offsets, hashes, block_offsets)


def serve(jobs: BinaryIO, results: BinaryIO) -> None:
    """The helper's loop: ``(job id, prepare_rows args)`` in, ``(job id, Prepared)`` out,
    until end of input. A job that raises answers None (the caller then recomputes it)."""
    while True:
        try:
            job_id, args = pickle.load(jobs)
        except EOFError:
            return
        try:
            result: Prepared | None = prepare_rows(*args)
        except Exception:  # noqa: BLE001 - reported by the caller's own in-place attempt
            result = None
        pickle.dump((job_id, result), results, protocol=pickle.HIGHEST_PROTOCOL)
        results.flush()


class Helper:
    """The parent's side of one helper process (see the module docstring)."""

    def __init__(self) -> None:
        code = (f"import sys; sys.path.insert(0, {str(_ROOT)!r}); "
                "from sim.workload.prefetch import serve; serve(sys.stdin.buffer, sys.stdout.buffer)")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.results: dict[int, Prepared | None] = {}
        self.unwanted: set[int] = set()
        self.ready = threading.Condition()
        self.alive = True
        self.delivered = False
        self.next_id = 0
        self.reader = threading.Thread(target=self._read, name="pagedsim-helper", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        stream = self.proc.stdout
        try:
            while True:
                job_id, result = pickle.load(stream)  # type: ignore[arg-type]
                with self.ready:
                    self.delivered = True
                    if job_id in self.unwanted:
                        self.unwanted.discard(job_id)
                    else:
                        self.results[job_id] = result
                    self.ready.notify_all()
        except Exception:  # noqa: BLE001 - end of output or a broken helper: stop using it
            with self.ready:
                self.alive = False
                self.ready.notify_all()

    def submit(self, args: tuple[Any, ...]) -> int | None:
        """Queue a job; its id, or None if the helper is gone."""
        if not self.alive:
            return None
        job_id = self.next_id
        self.next_id += 1
        try:
            pickle.dump((job_id, args), self.proc.stdin,  # type: ignore[arg-type]
                        protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            self.alive = False
            return None
        return job_id

    def take(self, job_id: int) -> Prepared | None:
        """A job's result: waited for once the helper has delivered before, taken only if
        already there while it is still starting up; None otherwise (compute it in place:
        the job's result is then discarded when it arrives)."""
        with self.ready:
            if job_id not in self.results and self.delivered:
                self.ready.wait_for(lambda: job_id in self.results or not self.alive)
            if job_id in self.results:
                return self.results.pop(job_id)
            self.unwanted.add(job_id)
            return None

    def drop(self, job_ids: list[int]) -> None:
        """Forget jobs whose results are no longer wanted (discarded if they still arrive)."""
        with self.ready:
            for job_id in job_ids:
                if self.results.pop(job_id, False) is False:
                    self.unwanted.add(job_id)

    def close(self) -> None:
        """End the helper (it exits at end of input)."""
        self.alive = False
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


_helper: Helper | None = None
_failed = False


def helper() -> Helper | None:
    """The shared helper; None on a one-core machine, with ``PAGEDSIM_HELPER=0``, or where it
    cannot be started (then every window is prepared in place)."""
    global _helper, _failed
    if _helper is not None and not _helper.alive:
        _helper, _failed = None, True
    if _helper is None and not _failed:
        if (os.cpu_count() or 1) < 2 or os.environ.get("PAGEDSIM_HELPER") == "0":
            _failed = True
            return None
        try:
            _helper = Helper()
        except (OSError, TypeError, ValueError):  # no usable interpreter path, no processes
            _failed = True
            return None
        atexit.register(_helper.close)
    return _helper
