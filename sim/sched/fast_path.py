"""Where the fast path applies: the runs whose shortcuts are proven equal to the reference loop.

The steady set (``steady.py``), its tallies (``tally.py``) and coasting (``coast.py``) are
proven for the paged manager and the contiguous ones under full attention, recompute
preemption, FCFS and no forks; ``fast_path_refusal`` names the first condition a run misses
(the engine then runs the reference loop, with the same results, only slower).
"""
from __future__ import annotations

from allocator.contiguous import ContiguousManager
from allocator.interface import KVManager
from allocator.paged import PagedKVCacheManager
from sim.config import RunConfig
from sim.workload.workload import Workload


def uses_fast_path(manager: KVManager, config: RunConfig, workload: Workload) -> bool:
    """Whether the fast path's shortcuts are proven for this run (``fast_path_refusal``)."""
    return fast_path_refusal(manager, config, workload) is None


def fast_path_refusal(manager: KVManager, config: RunConfig, workload: Workload) -> str | None:
    """Why the fast path does not apply to this run, or None where its shortcuts are proven:
    the paged manager or a contiguous one, full attention, recompute preemption, FCFS (its
    steady set keeps running order, which decides the victim), no forks (beams; cow samples
    on a paged manager), no speculative decoding and no allocation log; async scheduling
    or not (under async, coasting stops at finishes, ``coast.py``)."""
    sched = config.scheduler
    contiguous = isinstance(manager, ContiguousManager)
    apart = contiguous or sched.sampling_mode == "fanout"
    refusals = (
        (not sched.fast, "--no-fast"),
        (config.output.record_log, "the allocation log is recorded"),
        (config.model.sliding_window is not None, "sliding-window attention"),
        (not (contiguous or isinstance(manager, PagedKVCacheManager)), "an unknown manager"),
        (sched.preemption != "recompute", "swap preemption"),
        (sched.scheduling_policy != "fcfs", "priority scheduling"),
        (sched.spec is not None, "speculative decoding (every decode's token count varies)"),
        (not all(width == 1 and (n == 1 or apart)
                 for n, width in zip(workload.n, workload.beam_width)), "forked sequences"),
    )
    return next((reason for refused, reason in refusals if refused), None)
