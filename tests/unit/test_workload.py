"""Workload: trace rows to groups and sequences, with the trace's tokens and block hashes,
derived a window of rows at a time (sim/workload/workload.py)."""
from __future__ import annotations

import numpy as np
import pytest

from sim.workload import workload as workload_module
from sim.workload.block_hash import FastBlockHasher
from sim.workload.workload import Workload
from tests.unit.simkit import make_trace, run_config
from traces import add_system_prompt


def test_prefetched_tokens_equal_the_trace_contract() -> None:
    """Rows derived in batches get prompt_token_ids + output_token_ids, as per-row calls do;
    rows with a shared system prompt are not batched but still get the same tokens."""
    rng = np.random.default_rng(4)
    rows = [(0.1 * i, int(rng.integers(5, 300)), int(rng.integers(1, 60))) for i in range(40)]
    trace = add_system_prompt(make_trace(rows), 64, fraction=0.5, seed=2)
    derived = trace.derived_rows()
    assert 0 < derived.sum() < len(trace)
    workload = Workload(trace, run_config(num_gpu_blocks=512, max_model_len=256),
                        FastBlockHasher(16))
    for i in range(len(trace)):
        group = workload.make_group(i)
        if group.reject_reason:
            continue
        (seq,) = workload.first_seqs(group, split=False)
        expect = np.concatenate([trace.prompt_token_ids(i),
                                 trace.output_token_ids(i)[:group.output_len]])
        assert np.array_equal(seq.req.token_array, expect), i
        assert seq.req.num_prompt_tokens == group.prompt_len
        assert np.array_equal(seq.out_ids, expect[group.prompt_len:])
        table = workload.fast_hasher.hash_tokens(expect)
        seq.req.append_output_token_ids(list(seq.out_ids))
        assert seq.req.block_hashes == table


def test_windows_of_rows_give_every_row_its_own_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over many small windows, asked for in arrival order, every row gets the trace's tokens
    and the hasher's block hashes."""
    monkeypatch.setattr(workload_module, "PREFETCH", 8)
    rng = np.random.default_rng(11)
    rows = [(0.1 * i, int(rng.integers(5, 200)), int(rng.integers(1, 50))) for i in range(90)]
    trace = make_trace(rows)
    workload = Workload(trace, run_config(num_gpu_blocks=512, max_model_len=256),
                        FastBlockHasher(16))
    hasher = FastBlockHasher(16)
    for i in range(len(trace)):
        group = workload.make_group(i)
        (seq,) = workload.first_seqs(group, split=False)
        expect = np.concatenate([trace.prompt_token_ids(i),
                                 trace.output_token_ids(i)[:group.output_len]])
        assert np.array_equal(seq.req.token_array, expect), i
        seq.req.append_output_token_ids(list(seq.out_ids))
        assert seq.req.block_hashes == hasher.hash_tokens(expect), i
    assert not workload.ready


def test_over_length_rows_are_truncated_or_rejected() -> None:
    """max_model_len 64: a 64-token prompt is rejected, 40 + 50 keeps 24 outputs."""
    workload = Workload(make_trace([(0.0, 64, 5), (0.0, 40, 50)]),
                        run_config(max_model_len=64), None)
    rejected, cut = workload.make_group(0), workload.make_group(1)
    assert rejected.reject_reason == "prompt_too_long"
    assert cut.reject_reason is None and cut.output_len == 24 and cut.truncated


def test_prefetch_skips_rows_that_will_be_rejected() -> None:
    """A 16M-token prompt (over max_model_len) gets no token array; its neighbours do."""
    rows = [(0.1 * i, 16_000_000 if i == 3 else 50, 10) for i in range(8)]
    trace = make_trace(rows)
    workload = Workload(trace, run_config(num_gpu_blocks=512, max_model_len=256), None)
    workload._prefetch(0)
    assert sorted(workload.ready) == [0, 1, 2, 4, 5, 6, 7]
    assert workload.make_group(3).reject_reason == "prompt_too_long"
    assert all(len(tokens) == 60 for tokens, _ in workload.ready.values())
