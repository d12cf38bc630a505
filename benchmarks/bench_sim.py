"""Simulator speed: the full Azure conversation trace, default configuration, paged allocator.

Runs ``simulate.py``'s default configuration (Llama-2-7B on an A100-80GB, chunked prefill,
prefix caching, recompute preemption) with ``--allocators paged`` at ``--rate-scale`` 1 and 4
and prints simulated requests per second of wall time and of process CPU time (CPU time is
less disturbed by other jobs on a shared machine). Target: >= 2,000 req/s at rate 1, and no
more than 2x slower per request at rate 4. Figures go in benchmarks/RESULTS.md ("Simulator").

A shared VM's speed can drift by 1.5x within minutes, so each run is bracketed by a probe: the
seconds a fixed pure-Python loop takes (lower is a faster machine at that moment); compare
runs only at similar probe values, or alternate the builds being compared.

    PYTHONPATH=. python benchmarks/bench_sim.py [--trace PATH] [--scales 1,4] [--limit N]
                                                [--repeat N]
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from sim.cli import resolve
from sim.config import Options
from sim.engine import build_costs, replay
from traces import limit, load_trace, scale_rate

DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / \
    "AzureLLMInferenceTrace_conv.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--scales", default="1,4")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--allocator", default="paged")
    parser.add_argument("--repeat", type=int, default=1, help="runs per scale")
    args = parser.parse_args()
    config = resolve(Options(allocators=args.allocator, jobs=1))
    costs = build_costs(config)
    base = load_trace(args.trace)
    if args.limit:
        base = limit(base, args.limit)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"{len(base)} requests, {config.cache.num_gpu_blocks} blocks")
    runs = [float(s) for s in args.scales.split(",")] * args.repeat
    for scale in runs:
        trace = scale_rate(base, scale) if scale != 1 else base
        before = probe()
        wall, cpu = time.perf_counter(), time.process_time()
        result = replay(args.allocator, config, trace, costs)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        s = result.summary
        print(f"rate x{scale:g}: {wall:.1f} s wall ({len(trace) / wall:.0f} req/s), "
              f"{cpu:.1f} s CPU ({len(trace) / cpu:.0f} req/s); {result.counters['num_steps']} "
              f"steps, batch {s['mean_batch_size']:.1f}, preemptions {s['num_preemptions']}, "
              f"finished {s['num_finished']}, rejected {s['num_rejected']}, "
              f"fast path {result.fast}; probe {before:.2f} / {probe():.2f} s", flush=True)


def probe() -> float:
    """Seconds for a fixed pure-Python loop: the machine's speed at this moment."""
    start = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
