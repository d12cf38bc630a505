"""Property test of the fast path (sim/sched/steady.py, tally.py, coast.py): on random small
traces, pools and token budgets, with async scheduling and without, the fast path gives the
reference loop's step rows, request rows, summary and counters (``fast_and_reference``).

Tight pools preempt running (and, under async, in-flight) sequences; small budgets cut
prefills into chunks and make the steady set wake everyone; shared system prompts hit the
prefix cache, so a block cached a step early or late changes the run.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.simkit import fast_and_reference, make_trace
from tests.unit.test_steady import MODEL, count_steady_work
from traces import add_system_prompt

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

ROWS = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 300), st.integers(1, 120)),
                min_size=1, max_size=24)
"""(gap to the previous arrival in 1/64 s, prompt length, output length) per request."""


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@SETTINGS
@given(rows=ROWS, num_gpu_blocks=st.integers(24, 160),
       max_num_batched_tokens=st.sampled_from([48, 128, 512, 2048]),
       prefix_caching=st.booleans(), system_prompt=st.sampled_from([0, 17, 40]),
       name=st.sampled_from(["paged", "paged", "max"]))
def test_fast_path_equals_reference(rows: list[tuple[int, int, int]], num_gpu_blocks: int,
                                    max_num_batched_tokens: int, prefix_caching: bool,
                                    system_prompt: int, name: str,
                                    async_scheduling: bool) -> None:
    arrivals = [sum(gap for gap, _, _ in rows[:i + 1]) / 64 for i in range(len(rows))]
    trace = make_trace([(t, p, o) for t, (_, p, o) in zip(arrivals, rows)])
    if system_prompt:
        trace = add_system_prompt(trace, system_prompt, fraction=0.7, num_prompts=2)
    blocks = num_gpu_blocks if name == "paged" else num_gpu_blocks * 8
    with pytest.MonkeyPatch.context() as monkeypatch:
        counts = count_steady_work(monkeypatch)
        fast, _ = fast_and_reference(trace, name, MODEL, num_gpu_blocks=blocks,
                                     max_num_batched_tokens=max_num_batched_tokens,
                                     prefix_caching=prefix_caching,
                                     async_scheduling=async_scheduling)
    assert fast.summary["leaked_blocks"] == 0
    assert counts["left_in_flight"] == 0, "a finished sequence kept tokens in flight"
