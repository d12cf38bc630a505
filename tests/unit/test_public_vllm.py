"""benchmarks/public_vllm.py: every case cites its source, names metrics pagedsim reports,
and its options parse and resolve (model, GPU, KV capacity) without simulating anything."""
from __future__ import annotations

from sim.cli import parse_options, resolve
from sim.results.bench import METRICS
from tests.benchkit import load_benchmark

STATS = ("mean", "median")


def test_every_case_has_a_source_metrics_and_options_that_resolve() -> None:
    public = load_benchmark("public_vllm")
    names = [case["name"] for case in public.CASES]
    assert len(public.CASES) >= 5 and len(set(names)) == len(names)
    known = {f"{s}_{m}_ms" for s in STATS for m in METRICS} | {"request_throughput"}
    for case in public.CASES:
        assert case["source"].startswith("https://"), case["name"]
        assert case["what"] and case["note"], case["name"]
        assert case["measured"] and set(case["measured"]) <= known, case["name"]
        assert all(value > 0 for value in case["measured"].values()), case["name"]
        options = parse_options([*case["options"], "--allocators", "paged"])
        assert options.dataset_name == "random" and options.max_concurrency is not None
        config = resolve(options)
        assert config.cost.api_overhead_ms > 0, case["name"]  # the default path is on
        assert config.capacity is not None and config.capacity.num_gpu_blocks > 1
