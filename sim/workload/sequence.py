"""What the simulator tracks per trace request (a group) and per sequence (a sample or beam).

A trace request becomes one ``Group``: its arrival, lengths, timing and counters, counted once
whatever its n or beam width. Each sample or beam is a ``Seq`` wrapping the allocator's
``Request`` (the object the manager sees) plus scheduling state the manager must not hold:
its place in the running order, its output count and its precomputed output token ids.

A *steady* sequence decodes one token every step without needing the manager; its computed
count is not stored but derived from the global step index (``c = base + step``), so a step
costs nothing per steady sequence (see ``sim/sched/steady.py``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from allocator.request import Request

WAITING, RUNNING, SWAPPED, FINISHED, REJECTED = "waiting", "running", "swapped", "finished", "rejected"


class Group:
    """One trace request: all its samples or beams, timed and counted once.

    Times are simulated seconds; None until the event happens.
    """

    __slots__ = (
        "arrival",
        "beam_width",
        "cached_tokens",
        "finish",
        "first_scheduled",
        "first_token",
        "forked",
        "index",
        "line",
        "n",
        "num_live",
        "num_preemptions",
        "num_running",
        "output_len",
        "priority",
        "prompt_len",
        "reject_reason",
        "request_id",
        "rng",
        "seqs",
        "status",
        "trace_output_len",
    )

    def __init__(self, index: int, request_id: str, arrival: float, prompt_len: int,
                 output_len: int, trace_output_len: int, n: int, beam_width: int,
                 line: int | None) -> None:
        self.index = index
        self.request_id = request_id
        self.arrival = arrival
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.trace_output_len = trace_output_len
        self.n = n
        self.beam_width = beam_width
        self.line = line
        self.seqs: list[Seq] = []
        self.status = WAITING
        self.first_scheduled: float | None = None
        self.first_token: float | None = None
        self.finish: float | None = None
        self.num_preemptions = 0
        self.cached_tokens: int | None = None
        self.reject_reason: str | None = None
        self.num_live = 0
        self.forked = False
        self.rng: object = None
        self.num_running = 0
        self.priority = 0
        """The trace's priority (``--scheduling-policy priority``: lower is served first)."""

    @property
    def width(self) -> int:
        """Sequences this request will run at once (beams, or samples forked after prefill)."""
        return max(self.n, self.beam_width)

    @property
    def truncated(self) -> bool:
        """Whether the output was cut to fit max_model_len."""
        return self.output_len < self.trace_output_len


class Seq:
    """One sample or beam. ``req`` is the allocator's view; the rest is scheduler state.

    Invariants: a running sequence has a unique ``key`` that orders the running list (larger
    is later); ``num_out`` outputs exist, of which ``req.num_output_tokens`` are appended to
    ``req`` (the rest are appended lazily, before the manager next looks at ``req``).
    ``out_ids`` are all the outputs it will produce: a view of a ``SimRequest``'s token array,
    or a list of ints for a forked beam's plain ``Request``.
    """

    __slots__ = (
        "base",
        "call_at",
        "gen",
        "group",
        "held",
        "key",
        "label",
        "last_c",
        "num_out",
        "num_prompt",
        "out_ids",
        "pending_fork",
        "req",
        "sample",
        "status",
        "steady",
        "synced",
    )

    def __init__(self, req: Request, group: Group, sample: int, label: str,
                 out_ids: Any, num_out: int = 0) -> None:
        self.req = req
        self.group = group
        self.sample = sample
        self.label = label
        self.out_ids = out_ids
        self.num_prompt = req.num_prompt_tokens
        self.num_out = num_out
        self.key = -1
        self.status = WAITING
        self.steady = False
        self.base = 0
        self.gen = 0
        self.held = 0
        self.call_at = -1
        self.last_c = self.num_prompt + group.output_len - 2
        """The computed count at which the last token is computed (one before its end)."""
        self.pending_fork = False
        self.synced = 0
        """Fast path, contiguous managers: the computed count the manager last saw."""

    @property
    def num_tokens(self) -> int:
        """Prompt plus outputs generated so far (appended to ``req`` or not)."""
        return self.num_prompt + self.num_out

    def flush(self) -> None:
        """Append the outputs not yet in ``req`` (hashing any block that fills)."""
        req = self.req
        done = req.num_output_tokens
        if done < self.num_out:
            req.append_output_token_ids(self.out_ids[done:self.num_out])

    @property
    def request_id(self) -> str:
        return self.req.request_id
