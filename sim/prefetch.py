"""Token ids and fast block hashes of trace rows, prepared ahead in a helper process.

A replay derives every derived row's tokens (``traces.tokens.derive_token_runs``) and hashes
its blocks (``FastBlockHasher.hash_runs``): about a tenth of a run's work, and pure. The
simulation itself is one Python thread, so this work goes to one helper process that runs
windows of rows ahead of admission, using the machine's second core. The helper is spawned
once per interpreter and shared by every run; a window the helper has not delivered yet is computed in place instead, so results
never depend on timing, and any failure of the helper only costs speed.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from sim.block_hash import FastBlockHasher
from traces.tokens import derive_token_runs

LOOKAHEAD = 4
"""Windows submitted to the helper ahead of the one being admitted."""


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


_pool: ProcessPoolExecutor | None = None
_pool_failed = False
_delivered = False


def helper_pool() -> ProcessPoolExecutor | None:
    """The shared one-process helper pool; None on a one-core machine or where processes
    cannot be started (then every window is prepared in place)."""
    global _pool, _pool_failed
    if _pool is None and not _pool_failed:
        if (os.cpu_count() or 1) < 2:
            _pool_failed = True
            return None
        try:
            # spawn: the helper imports this module on its own time (forkserver would block
            # the first submit until its server has imported it; fork is unsafe with threads).
            context = multiprocessing.get_context("spawn")
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=context)
            atexit.register(_pool.shutdown, wait=False, cancel_futures=True)
        except (OSError, ImportError, NotImplementedError, ValueError):
            _pool_failed = True
    return _pool


def pool_broken() -> None:
    """Forget a helper pool that died; later windows are prepared in place."""
    global _pool, _pool_failed
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
    _pool, _pool_failed = None, True


def result_or_none(future: Future[Prepared]) -> Prepared | None:
    """A submitted window's result: waited for once the helper has delivered a window,
    taken only if ready while it is still starting up; None if it failed."""
    global _delivered
    if not _delivered and not future.done():
        future.cancel()
        return None
    try:
        prepared = future.result()
    except BrokenProcessPool:
        pool_broken()
        return None
    except Exception:  # noqa: BLE001 - the window is recomputed in place, which re-raises
        return None
    _delivered = True
    return prepared
