"""The helper process prepares exactly what preparing in place gives (sim/prefetch.py)."""
from __future__ import annotations

import numpy as np
import pytest

from sim import prefetch
from sim import workload as workload_module
from sim.block_hash import FastBlockHasher, as_hash_bytes
from sim.options import SchedulerConfig
from sim.workload import Workload
from tests.unit.simkit import make_trace


def test_helper_process_result_equals_in_place() -> None:
    """A window computed in the spawned helper arrives intact: same tokens and hashes."""
    pool = prefetch.helper_pool()
    if pool is None:
        pytest.skip("this machine cannot start a helper process")
    args = (7, ["a", "b", "req-3"], [40, 0, 77], 32000, 16)
    remote = pool.submit(prefetch.prepare_rows, *args).result(timeout=120)
    local = prefetch.prepare_rows(*args)
    assert np.array_equal(remote.tokens, local.tokens)
    assert np.array_equal(remote.offsets, local.offsets)
    assert np.array_equal(remote.block_offsets, local.block_offsets)
    assert as_hash_bytes(remote.hashes) == as_hash_bytes(local.hashes)
    hasher = FastBlockHasher(16)
    run = local.tokens[local.offsets[2]:local.offsets[3]]
    assert as_hash_bytes(local.hashes)[local.block_offsets[2]:] == hasher.hash_tokens(run)


def test_windows_from_the_helper_equal_the_trace_contract(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Over many small windows (some from the helper, some prepared in place, whichever is
    ready), every row gets the trace's tokens and the hasher's block hashes."""
    monkeypatch.setattr(workload_module, "PREFETCH", 8)
    rng = np.random.default_rng(11)
    rows = [(0.1 * i, int(rng.integers(5, 200)), int(rng.integers(1, 50))) for i in range(90)]
    trace = make_trace(rows)
    config = SchedulerConfig(num_gpu_blocks=512, max_model_len=256)
    workload = Workload(trace, config, FastBlockHasher(16))
    hasher = FastBlockHasher(16)
    try:
        for i in range(len(trace)):
            group = workload.make_group(i)
            (seq,) = workload.first_seqs(group, split=False)
            expect = np.concatenate([trace.prompt_token_ids(i),
                                     trace.output_token_ids(i)[:group.output_len]])
            assert np.array_equal(seq.req.token_array, expect), i
            seq.req.append_output_token_ids(list(seq.out_ids))
            assert seq.req.block_hashes == hasher.hash_tokens(expect), i
    finally:
        workload.close()
    assert not workload.pending
