"""The allocator benchmark runs standalone on synthetic data and its fast path changes nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchkit import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("bench_allocator")


def test_synthetic_stream_fast_equals_staged(bench: ModuleType) -> None:
    """The fast and staged allocate_slots paths hand out identical block ids on the stream."""
    bench.init_none_hash(bench.sha256)
    rows = bench.synthetic_rows(12, seed=3)
    prompts = bench.build_prompts(rows, seed=3)
    outputs = [generated for _, generated in rows]
    for caching in (True, False):
        fast = bench.run_stream(prompts, outputs, caching, digest=True)
        staged = bench.run_stream(prompts, outputs, caching, digest=True, staged=True)
        assert fast.digest == staged.digest
        assert fast.token_steps == staged.token_steps == sum(outputs)
        assert (fast.hit_tokens > 0) == caching


def test_prompts_share_system_prompt(bench: ModuleType) -> None:
    """Even requests start with the same 512-token system prompt; odd ones do not."""
    prompts = bench.build_prompts([(10, 1), (10, 1), (7, 1)], seed=0)
    assert [len(p) for p in prompts] == [522, 10, 519]
    assert prompts[0][:512] == prompts[2][:512] != prompts[1][:512]


def test_main_without_trace(bench: ModuleType, tmp_path: Path, capsys) -> None:
    """With no trace file the benchmark falls back to the synthetic stream and prints rates."""
    bench.main(["--trace", str(tmp_path / "absent.csv"), "--rows", "8"])
    out = capsys.readouterr().out
    assert "synthetic, 8 rows" in out
    assert out.count("token-steps/s") == 2


def test_bad_trace_row_exits(bench: ModuleType, tmp_path: Path) -> None:
    """A malformed trace row stops the benchmark with a message naming file and line."""
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nx,12,3\ny,oops,4\n")
    with pytest.raises(SystemExit, match=r"t.csv:3"):
        bench.load_rows(trace, 10)


def test_every_manager_runs_the_stream_with_forks(bench: ModuleType) -> None:
    """Through the interface every manager finishes the stream; paged forks copy on write."""
    sys.path.insert(0, str(BENCHMARKS))
    from bench_managers import run_all

    bench.init_none_hash(bench.sha256)
    rows = bench.synthetic_rows(6, seed=5)
    prompts = bench.build_prompts(rows, seed=5)
    outputs = [generated for _, generated in rows]
    results = {r.name: r for r in run_all(prompts, outputs, 2048, 16, 4096, n=3)}
    assert len(results) == 8
    assert results["paged"].token_steps == 3 * sum(outputs)
    assert results["paged"].copies > 0
    assert results["max (buddy)"].copies == 0
