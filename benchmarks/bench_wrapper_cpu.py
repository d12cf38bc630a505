"""Host cost of the attention wrappers' own Python, on CPU tensors (the launch a no-op).

Times paged_decode_attention (decodes), paged_prefill_attention (short extends) and
paged_attention (decodes and a prefill chunk in one batch), all given tensors and their maxima
(the calls that sync nothing), on the same tensors every call and on fresh q / out views every
call (as a forward pass makes them; the views' own cost is subtracted) at Llama-3-8B layer
shapes (32 / 8 heads, head size 128, block size 16, bf16 or fp8 cache; "extend 3x10/384": 3
sequences of 10 new tokens over 384 cached). Each round runs in a fresh process;
`--baseline DIR` (another commit's kernels: `git archive REV kernels | tar -x -C DIR`) alternates
its rounds with this tree's, so that a shared machine's swings hit both alike. Caches are
allocated, never filled (the wrapper reads no data). Times are CPU time of the process, so
other processes on a shared machine disturb them less than they would wall time.

    PYTHONPATH=. python benchmarks/bench_wrapper_cpu.py [--baseline DIR] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import kernels.attention as attention_module
import kernels.decode_attention as decode_module
from kernels.prefill_attention import paged_prefill_attention

SHAPES = (("1x4096", 1, 4096, torch.bfloat16), ("64x4096", 64, 4096, torch.bfloat16),
          ("fp8 1x4096", 1, 4096, torch.float8_e4m3fn))
# (name, (new tokens, context) per sequence, leading decodes: None for an extend batch)
BATCHES = (("extend 3x10/384", [(10, 394)] * 3, None),
           ("extend 1x16/16384", [(16, 16400)], None),
           ("extend 16x16/16384", [(16, 16400)] * 16, None),
           ("mixed 32x1/2048+512/4096", [(1, 2048)] * 32 + [(512, 4608)], 32))
HEADS, KV_HEADS, HEAD_SIZE, BLOCK = 32, 8, 128, 16
NUM_BLOCKS = 64 * 4096 // BLOCK + 64


class _NoLaunch:
    """Stands for a Triton kernel: indexing by a grid gives a launcher that does nothing."""

    def __getitem__(self, grid: object) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def per_call_us(fn: Callable[[], object], calls: int, batches: int = 5) -> float:
    """CPU time of this process per call of `calls` back-to-back calls (time slices given to
    other processes do not count), the best of `batches` batches, after one untimed call."""
    fn()
    best = float("inf")
    for _ in range(batches):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - t0)
    return best / calls * 1e6


def make_calls(wrapper: Callable[..., torch.Tensor], batch: int, ctx: int,
               kv_dtype: torch.dtype) -> dict[str, Callable[[], object]]:
    """The same-tensor call, the fresh-view call and the two views alone, for one shape."""
    k = torch.empty(NUM_BLOCKS, BLOCK, KV_HEADS, HEAD_SIZE, dtype=kv_dtype)
    v = torch.empty_like(k)
    q = torch.randn(batch, HEADS, HEAD_SIZE, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    width = -(-ctx // BLOCK)
    tables = torch.arange(1, batch * width + 1, dtype=torch.int32).view(batch, width)
    lens = torch.full((batch,), ctx, dtype=torch.int32)
    scales = (0.05, 0.05) if kv_dtype == torch.float8_e4m3fn else (1.0, 1.0)
    kw = {"max_context_len": ctx, "k_scale": scales[0], "v_scale": scales[1]}
    return {"same": lambda: wrapper(q, k, v, tables, lens, out=out, **kw),
            "fresh": lambda: wrapper(q[:], k, v, tables, lens, out=out[:], **kw),
            "views": lambda: (q[:], out[:])}


def make_batch_calls(seqs: list[tuple[int, int]], num_decodes: int | None
                     ) -> dict[str, Callable[[], object]]:
    """As `make_calls` for a batch of extends (paged_prefill_attention) or of decodes and
    prefill chunks (paged_attention), bf16 cache."""
    k = torch.empty(NUM_BLOCKS, BLOCK, KV_HEADS, HEAD_SIZE, dtype=torch.bfloat16)
    v = torch.empty_like(k)
    starts = [0]
    for new, _ in seqs:
        starts.append(starts[-1] + new)
    q = torch.randn(starts[-1], HEADS, HEAD_SIZE, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    width = -(-max(ctx for _, ctx in seqs) // BLOCK)
    tables = torch.arange(1, len(seqs) * width + 1, dtype=torch.int32).view(len(seqs), width)
    lens = torch.tensor([ctx for _, ctx in seqs], dtype=torch.int32)
    starts_t = torch.tensor(starts, dtype=torch.int32)
    most_new, most_ctx = max(n for n, _ in seqs), max(c for _, c in seqs)
    wrapper: Callable[..., torch.Tensor]
    if num_decodes is None:
        wrapper = paged_prefill_attention
        kw: dict[str, object] = {"max_new_tokens": most_new, "max_context_len": most_ctx}
    else:
        wrapper = attention_module.paged_attention
        kw = {"num_small_seqs": num_decodes, "small_query_len": 1, "max_query_len": most_new,
              "max_context_len": most_ctx}
    return {"same": lambda: wrapper(q, k, v, tables, starts_t, lens, out=out, **kw),
            "fresh": lambda: wrapper(q[:], k, v, tables, starts_t, lens, out=out[:], **kw),
            "views": lambda: (q[:], out[:])}


def names() -> list[str]:
    """The shapes' and batches' names, in timing order."""
    return [shape for shape, *_ in SHAPES] + [name for name, *_ in BATCHES]


def time_calls(res: dict[str, float], name: str, fns: dict[str, Callable[[], object]],
               calls: int) -> None:
    """Time one shape's calls from an empty launch cache into `res` (views subtracted)."""
    decode_module.clear_launch_cache()
    views = per_call_us(fns["views"], calls)
    res[f"{name}/same"] = per_call_us(fns["same"], calls)
    res[f"{name}/fresh"] = per_call_us(fns["fresh"], calls) - views


def time_round(calls: int) -> dict[str, float]:
    """Every shape in turn: us per call, same tensors and fresh views (views subtracted)."""
    res: dict[str, float] = {}
    real = attention_module.for_device
    attention_module.for_device = lambda kernel, device: _NoLaunch()
    try:
        for shape, batch, ctx, kv_dtype in SHAPES:
            time_calls(res, shape, make_calls(decode_module.paged_decode_attention, batch, ctx,
                                              kv_dtype), calls)
        for name, seqs, num_decodes in BATCHES:
            time_calls(res, name, make_batch_calls(seqs, num_decodes), calls)
    finally:
        attention_module.for_device = real
        decode_module.clear_launch_cache()
    return res


def round_in(root: Path, calls: int) -> dict[str, float]:
    """One round in a fresh interpreter importing the project from `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--calls", str(calls), "--one"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="another tree's root, to alternate with")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=1000, help="calls per timed batch")
    ap.add_argument("--one", action="store_true", help="one round here, as JSON")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(time_round(args.calls)))
        return 0
    if args.baseline is not None and not (args.baseline / "kernels").is_dir():
        print(f"--baseline {args.baseline}: no kernels/ there", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parents[1]
    roots = {"current": here} if args.baseline is None else {"baseline": args.baseline,
                                                             "current": here}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in roots}
    for _ in range(args.rounds):
        for name, root in roots.items():
            rounds[name].append(round_in(root, args.calls))
    print("| shape | version | same tensors us | fresh views us | rounds (same / fresh) |")
    print("| --- | --- | ---: | ---: | --- |")
    for shape in names():
        for name, res in rounds.items():
            same = [r[f"{shape}/same"] for r in res]
            fresh = [r[f"{shape}/fresh"] for r in res]
            spread = f"{min(same):.2f}-{max(same):.2f} / {min(fresh):.2f}-{max(fresh):.2f}"
            print(f"| {shape} | {name} | {statistics.median(same):.2f} | "
                  f"{statistics.median(fresh):.2f} | {spread} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
