"""Shared-prefix transformations: system prompts and multi-turn sessions.

Both add rows to the segment table (tokens.Segments) and lengthen prompts; ids are still
computed on demand. A later turn repeats the earlier turn's segments, then its prompt and
output:   turn 0 [sys][user0]
          turn 1 [sys][user0][out0][user1]
          turn 2 [sys][user0][out0][user1][out1][user2]
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from traces.distributions import LengthDist, fixed, rng_for
from traces.model import Trace
from traces.tokens import SEG_OUTPUT, SEG_PROMPT, SEG_SYSTEM, Segments

Row = tuple[int, str, int, int, int]


class _Builder:
    """Appends segment rows after an existing table; `finish` returns the new table."""

    def __init__(self, base: Segments) -> None:
        self.base = base
        self.rows: list[Row] = []

    def add(self, rows: list[Row]) -> int:
        first = len(self.base) + len(self.rows)
        self.rows.extend(rows)
        return first

    def old_rows(self, first: int, count: int) -> list[Row]:
        """Rows first .. first + count - 1, from the base table or the ones added."""
        b, nb = self.base, len(self.base)
        return [(int(b.kind[j]), str(b.key[j]), int(b.src[j]), int(b.start[j]),
                 int(b.length[j])) if j < nb else self.rows[j - nb]
                for j in range(first, first + count)]

    def finish(self) -> Segments:
        if not self.rows:
            return self.base
        kind, key, src, start, length = zip(*self.rows, strict=True)
        b = self.base
        return Segments(np.concatenate([b.kind, np.array(kind, dtype=np.int8)]),
                        np.concatenate([b.key.astype(np.str_), np.array(key, dtype=np.str_)]),
                        np.concatenate([b.src, np.array(src, dtype=np.int64)]),
                        np.concatenate([b.start, np.array(start, dtype=np.int64)]),
                        np.concatenate([b.length, np.array(length, dtype=np.int64)]))


def _seg_ranges(trace: Trace) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    if trace.seg_first is None or trace.seg_count is None:
        zeros = np.zeros(len(trace), dtype=np.int64)
        return zeros, zeros.copy()
    return trace.seg_first.copy(), trace.seg_count.copy()


def add_system_prompt(
    trace: Trace, length: int, fraction: float = 1.0, num_prompts: int = 1, seed: int = 0
) -> Trace:
    """Prepend one of `num_prompts` shared system prompts of `length` tokens to a random
    `fraction` of requests (of whole sessions, when the trace has sessions).

    Raises:
        ValueError: length < 1, num_prompts < 1, or fraction outside [0, 1].
    """
    if length < 1 or num_prompts < 1 or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"bad system prompt args length={length}, fraction={fraction}, "
                         f"num_prompts={num_prompts}")
    rng = rng_for(seed, "system-prompt")
    units = trace.session_ids if trace.session_ids is not None else trace.ids
    _, unit_of = np.unique(units, return_inverse=True)
    num_units = int(unit_of.max()) + 1 if len(trace) else 0
    chosen = (rng.random(num_units) < fraction)[unit_of]
    which = rng.integers(0, num_prompts, size=num_units)[unit_of]
    first, count = _seg_ranges(trace)
    build = _Builder(trace.segments)
    shared = [build.add([(SEG_SYSTEM, f"{seed}/{k}", -1, 0, length)])
              for k in range(num_prompts)]
    for i in np.flatnonzero(chosen):
        if count[i] == 0:
            first[i], count[i] = shared[which[i]], 1
            continue
        moved = [(kd, key, src, st + length if kd == SEG_OUTPUT else st, ln)
                 for kd, key, src, st, ln in build.old_rows(int(first[i]), int(count[i]))]
        sys_row: Row = (SEG_SYSTEM, f"{seed}/{which[i]}", -1, 0, length)
        first[i] = build.add([sys_row] + moved)
        count[i] += 1
    meta = trace.metadata.with_note(
        f"system prompt of {length} tokens ({num_prompts} variants) on "
        f"{int(chosen.sum())} requests")
    return trace.replace(prompt_lens=trace.prompt_lens + length * chosen, seg_first=first,
                         seg_count=count, segments=build.finish(), metadata=meta)


def multi_turn(
    trace: Trace, turns: int | LengthDist = 3, think_time_s: float = 10.0, seed: int = 0
) -> Trace:
    """Group consecutive requests into conversations whose turns share the history.

    Each session's first request keeps its arrival time; turn t arrives an exponential
    think time (mean `think_time_s`) after turn t - 1. A turn's prompt becomes the previous
    turn's prompt + its output + the request's own prompt tokens.

    Raises:
        ValueError: the trace already has sessions, or think_time_s < 0.
    """
    if trace.session_ids is not None:
        raise ValueError("trace already has sessions")
    if think_time_s < 0:
        raise ValueError(f"think_time_s must be >= 0, got {think_time_s}")
    dist = fixed(turns) if isinstance(turns, int) else turns
    rng = rng_for(seed, "multi-turn")
    size = len(trace)
    sizes = dist.sample(size, rng)
    starts = np.cumsum(np.concatenate([[0], sizes]))
    starts = starts[starts < size]
    session = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, size)))
    turn = np.arange(size) - starts[session]
    gaps = rng.exponential(think_time_s, size=size) if think_time_s > 0 else np.zeros(size)
    arrivals = trace.arrival_s.copy()
    for i in np.flatnonzero(turn > 0):
        arrivals[i] = arrivals[i - 1] + gaps[i]
    prompt, first, count, segs = _chain(trace, turn)
    order = np.argsort(arrivals, kind="stable")
    meta = trace.metadata.with_note(
        f"multi-turn: {len(starts)} sessions, think time {think_time_s:g}s, seed {seed}")
    return trace.take(order, arrival_s=arrivals[order], prompt_lens=prompt[order],
                      seg_first=first[order], seg_count=count[order], segments=segs,
                      session_ids=np.char.add("s", session.astype(np.str_))[order],
                      turns=turn[order], metadata=meta)


def _chain(
    trace: Trace, turn: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], Segments]:
    """New prompt lengths and segment ranges for requests grouped into turns."""
    prompt = trace.prompt_lens.copy()
    own = trace.prompt_lens - trace.prefix_lens
    first, count = _seg_ranges(trace)
    build = _Builder(trace.segments)
    src = trace.token_src
    for i in np.flatnonzero(turn > 0):
        p = i - 1
        rid = trace.request_id(int(p))
        rows = build.old_rows(int(first[p]), int(count[p])) + [
            (SEG_PROMPT, rid, -1 if src is None else int(src[p]), 0, int(own[p])),
            (SEG_OUTPUT, rid, -1, int(prompt[p]), int(trace.output_lens[p]))]
        first[i], count[i] = build.add(rows), len(rows)
        prompt[i] = prompt[p] + trace.output_lens[p] + own[i]
    return prompt, first, count, build.finish()
