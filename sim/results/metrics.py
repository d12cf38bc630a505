"""Per-step and per-request records of one run, and the summary computed from them.

Steps are appended as plain tuples (one per step; columns are built once at the end), so
recording costs one append per step. Requests are read from the finished groups. Summary
definitions follow vLLM's benchmark and prefix-cache statistics (see ``sim/results/results_schema.json``):
duration = last finish - first arrival; TTFT = first token - arrival; TPOT = (e2e - TTFT) /
(output - 1) over requests with output > 1; normalised latency = mean of e2e / output tokens;
a request with n samples or beams counts once (its output length once); memory fractions are
step-duration-weighted means of the snapshot categories over capacity; mean_batch_size is the
duration-weighted mean of running requests. Sums use ``math.fsum`` so results do not depend
on summation order.
"""
from __future__ import annotations

import math
from operator import itemgetter
from typing import Any

import numpy as np

from sim.workload.sequence import Group

STEP_COLUMNS = (
    "step", "time_s", "duration_s", "attention_s", "linear_s", "overhead_s", "swap_s",
    "num_running_seqs", "num_running_reqs", "num_waiting", "num_swapped", "num_scheduled_seqs",
    "prefill_tokens", "decode_tokens", "token_states", "reserved", "internal_frag",
    "cached_evictable", "external_frag", "free", "logical_slots", "prefix_queries",
    "prefix_hits", "num_preemptions", "num_cow_copies", "swap_out_blocks", "swap_in_blocks",
    "overlapped",
)
FLOAT_STEP_COLUMNS = ("time_s", "duration_s", "attention_s", "linear_s", "overhead_s", "swap_s")

REQUEST_COLUMNS = (
    "request_id", "index", "trace_line", "status", "arrival_s", "first_scheduled_s",
    "first_token_s", "finish_s", "prompt_tokens", "output_tokens", "trace_output_tokens",
    "cached_tokens", "num_preemptions", "n", "beam_width", "truncated", "rejection_reason",
)

SUMMARY_KEYS = (
    "num_requests", "num_finished", "num_rejected", "duration_s", "throughput_req_s",
    "throughput_tok_s", "ttft_mean_s", "ttft_p50_s", "ttft_p99_s", "tpot_mean_s", "tpot_p99_s",
    "e2el_mean_s", "e2el_p99_s", "norm_latency_mean_s", "mean_batch_size",
    "kv_token_states_frac", "kv_reserved_frac", "kv_internal_frag_frac",
    "kv_external_frag_frac", "kv_free_frac", "kv_cached_frac", "prefix_hit_rate",
    "num_preemptions", "num_cow_copies", "leaked_blocks", "wall_s",
)
_FRACTIONS = (
    ("kv_token_states_frac", "token_states"), ("kv_reserved_frac", "reserved"),
    ("kv_internal_frag_frac", "internal_frag"), ("kv_external_frag_frac", "external_frag"),
    ("kv_free_frac", "free"), ("kv_cached_frac", "cached_evictable"),
)


QUIET = (0, 0, 0, 0, 0, 0)
"""The event counts of a step without prefix lookups, preemptions, copies or swaps."""


def step_row(step: int, time_s: float, duration_s: float, attention_s: float, linear_s: float,
             overhead_s: float, swap_s: float, num_running_seqs: int, num_running_reqs: int,
             num_waiting: int, num_swapped: int, num_scheduled_seqs: int, prefill_tokens: int,
             decode_tokens: int, memory: tuple[int, ...],
             events: tuple[int, ...], overlapped: int = 0) -> tuple[Any, ...]:
    """One steps.parquet row, in STEP_COLUMNS order.

    Args:
        memory: the snapshot (token_states, reserved, internal_frag, cached_evictable,
            external_frag, free, logical_slots).
        events: (prefix_queries, prefix_hits, num_preemptions, num_cow_copies,
            swap_out_blocks, swap_in_blocks); ``QUIET`` when nothing happened.
        overlapped: 1 if the step was scheduled while the one before it ran (async).
    """
    return (step, time_s, duration_s, attention_s, linear_s, overhead_s, swap_s,
            num_running_seqs, num_running_reqs, num_waiting, num_swapped, num_scheduled_seqs,
            prefill_tokens, decode_tokens, *memory, *events, overlapped)


class RunLog:
    """Everything one allocator's run records."""

    def __init__(self, num_requests: int, delivery_s: float = 0.0) -> None:
        self.num_requests = num_requests
        self.delivery_s = delivery_s
        """Seconds from the step that samples a token to the client (the API path's way
        out): added to first_token_s and finish_s, which are what the client sees."""
        self.steps: list[tuple[Any, ...]] = []
        self.groups: list[Group] = []
        self.first_arrival: float | None = None

    def add_group(self, group: Group) -> None:
        """A request left the system (finished or rejected)."""
        group.seqs = []
        self.groups.append(group)

    def step_columns(self) -> dict[str, list[Any]]:
        """The per-step rows as columns (in STEP_COLUMNS order)."""
        if not self.steps:
            return {name: [] for name in STEP_COLUMNS}
        return {name: list(col) for name, col in zip(STEP_COLUMNS, zip(*self.steps))}

    def step_column(self, name: str) -> list[Any]:
        """One per-step column (cheaper than ``step_columns`` when a few are needed)."""
        return list(map(itemgetter(STEP_COLUMNS.index(name)), self.steps))

    def request_columns(self) -> dict[str, list[Any]]:
        """One row per request, in trace order."""
        groups = sorted(self.groups, key=lambda g: g.index)
        if not groups:
            return {name: [] for name in REQUEST_COLUMNS}
        d = self.delivery_s
        rows = [(g.request_id, g.index, g.line, g.status, g.arrival, g.first_scheduled,
                 _later(g.first_token, d), _later(g.finish, d), g.prompt_len, g.output_len,
                 g.trace_output_len, g.cached_tokens, g.num_preemptions, g.n, g.beam_width,
                 g.truncated, g.reject_reason) for g in groups]
        return {name: list(col) for name, col in zip(REQUEST_COLUMNS, zip(*rows))}


def _later(when: float | None, delay: float) -> float | None:
    return when + delay if when is not None and delay else when


def _mean(values: np.ndarray) -> float | None:
    return math.fsum(values.tolist()) / len(values) if len(values) else None


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def summarize(log: RunLog, capacity: int, *, caching: bool, leaked_blocks: int,
              num_cow_copies: int, wall_s: float) -> dict[str, Any]:
    """The summary entry of one allocator (exactly SUMMARY_KEYS, in that order)."""
    req = log.request_columns()
    status = np.array(req["status"], dtype=object)
    done = status == "finished"
    arrival = np.array(req["arrival_s"], dtype=np.float64)
    first = np.array([t if t is not None else np.nan for t in req["first_token_s"]])[done]
    finish = np.array([t if t is not None else np.nan for t in req["finish_s"]])[done]
    output = np.array(req["output_tokens"], dtype=np.int64)[done]
    arrived = arrival[done]
    ttft, e2el = first - arrived, finish - arrived
    multi = output > 1
    tpot = (e2el[multi] - ttft[multi]) / (output[multi] - 1)
    duration = (float(finish.max()) - float(arrival.min())) if done.any() else None
    column = log.step_column
    dur = np.array(column("duration_s"), dtype=np.float64)
    total = math.fsum(dur.tolist())
    out: dict[str, Any] = {
        "num_requests": log.num_requests,
        "num_finished": int(done.sum()),
        "num_rejected": int((status == "rejected").sum()),
        "duration_s": duration,
        "throughput_req_s": int(done.sum()) / duration if duration else None,
        "throughput_tok_s": int(output.sum()) / duration if duration else None,
        "ttft_mean_s": _mean(ttft), "ttft_p50_s": _pct(ttft, 50), "ttft_p99_s": _pct(ttft, 99),
        "tpot_mean_s": _mean(tpot), "tpot_p99_s": _pct(tpot, 99),
        "e2el_mean_s": _mean(e2el), "e2el_p99_s": _pct(e2el, 99),
        "norm_latency_mean_s": _mean(e2el / output) if len(output) else None,
        "mean_batch_size": _weighted(dur, column("num_running_reqs"), total),
    }
    for key, name in _FRACTIONS:
        frac = _weighted(dur, column(name), total)
        out[key] = None if frac is None else frac / capacity
    queries = math.fsum(column("prefix_queries"))
    out["prefix_hit_rate"] = (math.fsum(column("prefix_hits")) / queries
                              if caching and queries else None)
    out["num_preemptions"] = int(math.fsum(column("num_preemptions")))
    out["num_cow_copies"] = num_cow_copies
    out["leaked_blocks"] = leaked_blocks
    out["wall_s"] = wall_s
    return out


def _weighted(dur: np.ndarray, values: list[Any], total: float) -> float | None:
    if not total:
        return None
    return math.fsum((dur * np.asarray(values, dtype=np.float64)).tolist()) / total
