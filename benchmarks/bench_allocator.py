"""Token-steps per second of the paged allocator on a seeded Azure-conversation op stream.

Request i's prompt is ``ContextTokens`` ids drawn uniformly from a 32,000-token vocabulary
(seed 0), prefixed for even i by one fixed 512-token system prompt. Requests are admitted in
order while fewer than 128 run and admission succeeds (prefix lookup, then allocate the prompt
minus the hit); every step each running request appends one output token (id 1) and calls
``allocate_slots(req, 1)``; a request is freed after ``GeneratedTokens`` steps. A decode step
that finds the pool short preempts the newest running request (vLLM FCFS, recompute). One
token-step = one append + allocate. Block size 16, 16,384 blocks, sha256 hashing.

    python benchmarks/bench_allocator.py [--quick] [--rows N] [--trace CSV] [--digest]
    PYTHONPATH=/path/to/vllm python benchmarks/bench_allocator.py --vllm --repeat 3
    python benchmarks/bench_allocator.py --vllm-version 0.33    # pagedsim under that profile
    python benchmarks/bench_allocator.py --managers [--n 4]   # every manager, fork workload

``--managers`` runs the same stream through the manager interface for the paged manager and
each contiguous baseline (``bench_managers.py``); ``--n 4`` forks every request into 4
samples that decode different tokens (copy-on-write for paged, own regions for contiguous).

``--vllm`` also runs vLLM 0.14's own ``KVCacheManager`` and ``Request`` on the same stream,
alternating with pagedsim's, prints the speed ratio and checks that both hand out the same block
ids (digest over every block id and admission). vLLM is not a dependency: point PYTHONPATH at
an unpacked vllm-0.14.0 wheel plus its import-time packages.

Without the trace (``../shared/traces`` beside the repo) a seeded synthetic stream is used.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from alloc_stream import build_prompts, load_rows, synthetic_rows

from allocator import KVCacheBlocks, KVCacheConfig, KVCacheManager, Request
from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.profiles import DEFAULT_PROFILE, VllmProfile, profile_for

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2] / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
)
BLOCK_SIZE = 16
NUM_BLOCKS = 16_384
MAX_RUNNING = 128
MAX_MODEL_LEN = 32_768


@dataclass(frozen=True, slots=True)
class StreamResult:
    """Outcome of one run of the stream."""

    token_steps: int
    seconds: float
    cpu_seconds: float
    preemptions: int
    hit_tokens: int
    digest: str

    @property
    def rate(self) -> float:
        """Token-steps per wall-clock second."""
        return self.token_steps / self.seconds

    @property
    def cpu_rate(self) -> float:
        """Token-steps per CPU second of this process (steadier on a shared machine)."""
        return self.token_steps / self.cpu_seconds


def run_stream(
    prompts: list[list[int]],
    outputs: list[int],
    enable_caching: bool,
    digest: bool = False,
    staged: bool = False,
    vllm: bool = False,
    num_blocks: int = NUM_BLOCKS,
    profile: VllmProfile = DEFAULT_PROFILE,
) -> StreamResult:
    """Run the op stream once and time it (admissions and decode steps together).

    ``staged`` sends every ``allocate_slots`` call through the vLLM-shaped staged path, as
    the implementation did before it gained a fast path (for before/after comparisons).
    ``vllm`` runs vLLM's own ``KVCacheManager`` and ``Request`` instead (``vllm`` importable).
    """
    if vllm:
        manager, waiting = _vllm_setup(prompts, outputs, enable_caching, num_blocks)
    else:
        manager = KVCacheManager(
            KVCacheConfig(num_blocks, BLOCK_SIZE), MAX_MODEL_LEN, enable_caching=enable_caching,
            vllm_profile=profile,
        )
        if staged:
            _force_staged_path(manager)
        hasher = (get_request_block_hasher(BLOCK_SIZE, sha256, profile.extra_keys)
                  if enable_caching else None)
        waiting = deque(
            Request(str(i), prompt, max_tokens=out, block_hasher=hasher, final_output_len=out)
            for i, (prompt, out) in enumerate(zip(prompts, outputs))
        )
    log = hashlib.blake2b(digest_size=16) if digest else None
    running: list[Request] = []
    token_steps = preemptions = hit_tokens = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    while waiting or running:
        while waiting and len(running) < MAX_RUNNING:
            request = waiting[0]
            hit_blocks, num_hit = manager.get_computed_blocks(request)
            new_blocks = manager.allocate_slots(
                request, request.num_tokens - num_hit, num_hit, hit_blocks
            )
            if new_blocks is None:
                break
            waiting.popleft()
            request.num_computed_tokens = request.num_tokens
            running.append(request)
            hit_tokens += num_hit
            if log is not None:
                log.update(repr(manager.get_block_ids(request.request_id)).encode())
        still_running = []
        for request in running:
            request.append_output_token_ids(1)
            while (new_blocks := manager.allocate_slots(request, 1)) is None:
                # Victims come from the end of ``running``: not yet visited in this loop.
                victim = running.pop()
                preemptions += 1
                _preempt(manager, victim, waiting)
                if victim is request:
                    break
            if new_blocks is None:
                continue
            token_steps += 1
            if log is not None and new_blocks.blocks[0]:
                log.update(repr(new_blocks.get_block_ids()).encode())
            request.num_computed_tokens += 1
            if request.num_output_tokens >= request.max_tokens:
                manager.free(request)
            else:
                still_running.append(request)
        running = still_running
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if not vllm:
        manager.check_invariants()
    if manager.block_pool.get_num_free_blocks() != num_blocks - 1:
        raise AssertionError("blocks leaked: the pool is not back to N - 1 free blocks")
    return StreamResult(
        token_steps, seconds, cpu_seconds, preemptions, hit_tokens, log.hexdigest() if log else "-"
    )


def _vllm_setup(
    prompts: list[list[int]], outputs: list[int], enable_caching: bool, num_blocks: int
) -> tuple[Any, deque[Any]]:
    """vLLM's manager and requests for the same stream (one full-attention group, sha256)."""
    try:
        import torch
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256 as vllm_sha256
        from vllm.v1.core.kv_cache_manager import KVCacheManager as VllmKVCacheManager
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher as vllm_block_hasher
        from vllm.v1.core.kv_cache_utils import init_none_hash as vllm_init_none_hash
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec
        from vllm.v1.kv_cache_interface import KVCacheConfig as VllmConfig
        from vllm.v1.request import Request as VllmRequest
    except ImportError as exc:
        sys.exit(f"--vllm needs an importable vllm (0.14): {exc}")
    spec = FullAttentionSpec(
        block_size=BLOCK_SIZE, num_kv_heads=8, head_size=128, dtype=torch.bfloat16
    )
    config = VllmConfig(num_blocks, [], [KVCacheGroupSpec(["layer.0"], spec)])
    manager = VllmKVCacheManager(config, MAX_MODEL_LEN, BLOCK_SIZE, enable_caching=enable_caching)
    vllm_init_none_hash(vllm_sha256)
    hasher = vllm_block_hasher(BLOCK_SIZE, vllm_sha256) if enable_caching else None
    waiting = deque(
        VllmRequest(
            str(i), prompt, SamplingParams(max_tokens=out), None, None, block_hasher=hasher
        )
        for i, (prompt, out) in enumerate(zip(prompts, outputs))
    )
    return manager, waiting


def _force_staged_path(manager: KVCacheManager) -> None:
    def allocate_slots(
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: KVCacheBlocks | None = None,
    ) -> KVCacheBlocks | None:
        return manager._allocate_slots_staged(
            request, num_new_tokens, num_new_computed_tokens, new_computed_blocks, 0, 0, False
        )

    manager.allocate_slots = allocate_slots  # type: ignore[method-assign,assignment]


def _preempt(manager: KVCacheManager, victim: Request, waiting: deque[Request]) -> None:
    manager.free(victim)
    victim.num_computed_tokens = 0
    victim.num_preemptions += 1
    waiting.appendleft(victim)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2000, help="trace rows to use (default 2000)")
    parser.add_argument("--quick", action="store_true", help="200 rows, for a smoke run")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Azure trace CSV")
    parser.add_argument("--synthetic", action="store_true", help="ignore the trace")
    parser.add_argument("--seed", type=int, default=0, help="prompt-token seed (default 0)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode; best is shown")
    parser.add_argument("--num-blocks", type=int, default=NUM_BLOCKS,
                        help=f"pool size in blocks (default {NUM_BLOCKS}; smaller forces preemption)")
    parser.add_argument("--digest", action="store_true", help="print a digest of all block ids")
    parser.add_argument(
        "--staged", action="store_true", help="force vLLM's staged allocate_slots (no fast path)"
    )
    parser.add_argument(
        "--vllm", action="store_true",
        help="also run vLLM's own KVCacheManager (vllm 0.14 importable) and compare digests",
    )
    parser.add_argument("--vllm-version", default="0.14",
                        help="pagedsim's release profile (default 0.14)")
    parser.add_argument("--managers", action="store_true",
                        help="run every manager of allocator.registry through the interface")
    parser.add_argument("--n", type=int, default=1, help="with --managers: samples per request")
    args = parser.parse_args(argv)
    try:
        profile = profile_for(args.vllm_version)
    except ValueError as exc:
        parser.error(f"--vllm-version: {exc}")
    num_rows = 200 if args.quick else args.rows
    if not args.synthetic and args.trace.is_file():
        rows, source = load_rows(args.trace, num_rows), f"{args.trace.name}, first {num_rows} rows"
    else:
        rows, source = synthetic_rows(num_rows, args.seed), f"synthetic, {num_rows} rows"
    init_none_hash(sha256)
    prompts = build_prompts(rows, args.seed)
    outputs = [generated for _, generated in rows]
    print(
        f"stream: {source}; block size {BLOCK_SIZE}, {args.num_blocks} blocks, sha256, "
        f"max {MAX_RUNNING} running; pagedsim {profile.describe()}"
    )
    if args.managers:
        _run_managers(prompts, outputs, args.n)
        return
    for enable_caching in (True, False):
        # With --vllm the two implementations alternate, so that a slow minute on a shared
        # machine hits both alike; the ratio is then the figure to read.
        impls = (False, True) if args.vllm else (False,)
        results: dict[bool, list[StreamResult]] = {impl: [] for impl in impls}
        for _ in range(args.repeat):
            for impl in impls:
                results[impl].append(
                    run_stream(prompts, outputs, enable_caching, args.digest or args.vllm,
                               args.staged, vllm=impl, num_blocks=args.num_blocks,
                               profile=profile)
                )
        for impl in impls:
            best = max(results[impl], key=lambda r: r.rate)
            label = f"caching {'on ' if enable_caching else 'off'}" + (" vllm" if impl else "")
            print(
                f"{label}: {best.rate:,.0f} token-steps/s "
                f"({best.cpu_rate:,.0f} per CPU-second; "
                f"{best.token_steps:,} token-steps in {best.seconds:.2f} s, "
                f"{best.preemptions} preemptions, {best.hit_tokens:,} hit tokens, "
                f"digest {best.digest})"
            )
        if args.vllm:
            ours, theirs = (max(results[i], key=lambda r: r.rate) for i in impls)
            same = "identical" if ours.digest == theirs.digest else "DIFFERENT"
            print(f"  pagedsim / vLLM = {ours.rate / theirs.rate:.2f}x; block ids {same}")


def _run_managers(prompts: list[list[int]], outputs: list[int], n: int) -> None:
    from bench_managers import run_all

    print(f"managers through the KVManager interface, n={n} sample(s) per request")
    for result in run_all(prompts, outputs, NUM_BLOCKS, BLOCK_SIZE, MAX_MODEL_LEN, n):
        print(f"  {result.name:20s} {result.rate:>10,.0f} token-steps/s "
              f"({result.token_steps:,} in {result.seconds:.2f} s, "
              f"{result.preemptions} preemptions, {result.copies} copy-on-write copies)")


if __name__ == "__main__":
    main()
