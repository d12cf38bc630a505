"""The helper process prepares exactly what preparing in place gives (sim/prefetch.py)."""
from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.workload import prefetch
from sim.workload import workload as workload_module
from sim.workload.block_hash import FastBlockHasher, as_hash_bytes
from sim.workload.workload import Workload
from tests.unit.simkit import make_trace, run_config

ROOT = Path(__file__).resolve().parents[2]


def test_helper_process_result_equals_in_place() -> None:
    """A window computed in the helper process arrives intact: same tokens and hashes."""
    helper = prefetch.helper()
    if helper is None:
        pytest.skip("this machine runs no helper process (one core or PAGEDSIM_HELPER=0)")
    args = (7, ["a", "b", "req-3"], [40, 0, 77], 32000, 16)
    job = helper.submit(args)
    assert job is not None
    with helper.ready:  # wait for this job even if the helper is still starting up
        assert helper.ready.wait_for(lambda: job in helper.results, timeout=120)
    remote = helper.take(job)
    local = prefetch.prepare_rows(*args)
    assert remote is not None and local.hashes is not None
    assert np.array_equal(remote.tokens, local.tokens)
    assert np.array_equal(remote.offsets, local.offsets)
    assert np.array_equal(remote.block_offsets, local.block_offsets)
    assert as_hash_bytes(remote.hashes) == as_hash_bytes(local.hashes)
    hasher = FastBlockHasher(16)
    run = local.tokens[local.offsets[2]:local.offsets[3]]
    assert as_hash_bytes(local.hashes)[local.block_offsets[2]:] == hasher.hash_tokens(run)


def test_a_job_taken_before_it_arrives_is_discarded_on_arrival() -> None:
    """While a new helper is still starting, take() gives None (the window is computed in
    place) and the job's late result is dropped, not kept for ever."""
    if prefetch.helper() is None:
        pytest.skip("this machine runs no helper process (one core or PAGEDSIM_HELPER=0)")
    helper = prefetch.Helper()
    try:
        job = helper.submit((7, ["a"], [40], 32000, 16))
        assert job is not None
        assert helper.take(job) is None  # a fresh helper has not delivered anything yet
        with helper.ready:
            assert helper.ready.wait_for(lambda: helper.delivered, timeout=120)
        assert job not in helper.results
        assert not helper.unwanted
    finally:
        helper.close()


def test_serve_answers_jobs_in_order() -> None:
    """The helper's loop, in process: one answer per job, None for a job that raises."""
    jobs, answers = io.BytesIO(), io.BytesIO()
    good = (3, ["x"], [33], 100, 16)
    for job in [(0, good), (1, (3, ["x"], [-1], 100, 16))]:
        pickle.dump(job, jobs)
    jobs.seek(0)
    prefetch.serve(jobs, answers)
    answers.seek(0)
    (first, result), (second, failed) = pickle.load(answers), pickle.load(answers)
    assert (first, second, failed) == (0, 1, None)
    assert np.array_equal(result.tokens, prefetch.prepare_rows(*good).tokens)


def test_an_unguarded_script_runs_once(tmp_path: Path) -> None:
    """A caller's script without ``if __name__ == "__main__"`` is not run again by the
    helper (multiprocessing's spawn would import it in the child)."""
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "print('top level', file=sys.stderr)\n"
        "from tests.unit.simkit import make_trace, simulate\n"
        "trace = make_trace([(0.01 * i, 40, 8) for i in range(700)])\n"
        "r = simulate(trace, num_gpu_blocks=400)\n"
        "print('finished', r.summary['num_finished'], file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    assert done.stderr.count("top level") == 1, done.stderr
    assert "finished 700" in done.stderr


def test_windows_from_the_helper_equal_the_trace_contract(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Over many small windows (some from the helper, some prepared in place, whichever is
    ready), every row gets the trace's tokens and the hasher's block hashes."""
    monkeypatch.setattr(workload_module, "PREFETCH", 8)
    rng = np.random.default_rng(11)
    rows = [(0.1 * i, int(rng.integers(5, 200)), int(rng.integers(1, 50))) for i in range(90)]
    trace = make_trace(rows)
    workload = Workload(trace, run_config(num_gpu_blocks=512, max_model_len=256),
                        FastBlockHasher(16))
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
