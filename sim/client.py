"""The benchmark client's concurrency limit (``--max-concurrency N``), as ``vllm bench serve``.

vLLM's client holds a semaphore of N slots: a request is sent when it arrives or, if N are in
flight, when one of them finishes, whichever is later. ``limited_arrivals`` replays that in
front of the engine: each request waits for its arrival time, then for a free slot, and only
then enters the waiting queue, with its ``arrival`` set to the send time, so TTFT and E2EL
count from the send as vLLM measures them. A slot frees when its request leaves (finished or
rejected), at the end of the step in which it left. The next send may then depend on any
finish, so the engine runs step by step (``EngineState.coast`` off: no quiet steps run ahead
in one go; the same results, more slowly). With the API path on (``sim/cost/api_path.py``)
a sent request joins the waiting queue after its inbound time, in send order, and its slot
frees when the client has its last token: the path's way out after the request left.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any, Protocol

import simpy

from sim.cost.api_path import ApiPath
from sim.sched.scheduler import Scheduler
from sim.workload.sequence import Group
from sim.workload.workload import Workload


class ArrivalState(Protocol):
    """What the arrival process shares with the engine (``sim.engine.EngineState``)."""

    wake: simpy.Event | None
    num_arrived: int
    next_arrival: float


NO_PATH = ApiPath()


class Client:
    """N slots; ``leave`` (a group left the engine) frees one and wakes a waiting send."""

    def __init__(self, env: simpy.Environment, limit: int, path: ApiPath = NO_PATH) -> None:
        self.env = env
        self.limit = limit
        self.path = path
        self.in_flight = 0
        self.freed: simpy.Event | None = None

    def leave(self, group: Group) -> None:
        if self.path.output_s:
            self.env.timeout(self.path.output_s).callbacks.append(self._free)
        else:
            self._free()

    def _free(self, _: object = None) -> None:
        self.in_flight -= 1
        if self.freed is not None and not self.freed.triggered:
            self.freed.succeed()

    def chain(self, callback: Callable[[Group], None]) -> Callable[[Group], None]:
        """``callback`` followed by freeing the group's slot."""
        def left(group: Group) -> None:
            callback(group)
            self.leave(group)
        return left


def limited_arrivals(env: simpy.Environment, workload: Workload, sched: Scheduler,
                     state: ArrivalState, client: Client) -> Generator[simpy.Event, Any, None]:
    """Replay arrival times through the client's slots (see the module docstring)."""
    add = sched.admission.add_group
    path, last = client.path, -math.inf

    def enter(group: Group) -> None:
        add(group)
        state.num_arrived += 1
        if state.wake is not None and not state.wake.triggered:
            state.wake.succeed()
    for index, when in enumerate(workload.arrivals):
        now = env.now
        if when > now:
            state.next_arrival = now + (when - now)
            yield env.timeout(when - now)
        while client.in_flight >= client.limit:
            client.freed = env.event()
            yield client.freed
            client.freed = None
        group = workload.make_group(index)
        group.arrival = env.now
        client.in_flight += 1
        if not path.on:
            enter(group)
            continue
        last = path.entry(env.now, group.prompt_len, last)
        env.timeout(last - env.now).callbacks.append(lambda _, g=group: enter(g))
    state.next_arrival = math.inf
