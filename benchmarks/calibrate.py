"""Calibration grid: synthetic batch shapes through the executed forward, one JSON artefact.

    PYTHONPATH=. python3 benchmarks/calibrate.py --model Llama-3-8B --out FILE.json
    PYTHONPATH=. python3 benchmarks/calibrate.py --model-json config.json --grid smoke --out F
    PYTHONPATH=. python3 benchmarks/calibrate.py --model Llama-3-8B --kv-cache-dtype fp8 --out F

Each grid point is a synthetic step executed exactly as a logged step is (kernels/execute/
step.py: whole decoder forward, CUDA graph and eager times, per-part graphs): decode-only
(B sequences with c tokens cached), prefill (k chunks of n new tokens, each after p cached;
k is 1 unless a point says more) and mixed (B decodes plus the chunks). Block tables are
random permutations of one pool sized for the largest point. The model comes from a sim preset (`--model`, dense presets) or an HF
`config.json` (`--model-json`, MoE too). The artefact (format "pagedsim-step-calibration",
described in kernels/execute/README.md and inside the file itself) holds the model, GPU,
dtypes, software, date, method and every point; it replaces the per-layer table CSV.
`--kv-cache-dtype fp8` (or fp8_e4m3) runs fp8 e4m3 caches (scales 1.0) beside the model-dtype
weights; the artefact's `model.kv_cache_dtype` says so, and the simulator fits it only for runs
with that cache dtype (sim/cost/calibration.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from kernels.execute.arch import Architecture, kv_cache_dtype
from kernels.execute.model import Engine, GiB
from kernels.execute.output import METHOD, STEP_FIELDS, AtomicWriter, environment
from kernels.execute.step import ExecOptions, execute_record
from kernels.execute.timing import TimingOptions
from kernels.validate.log import SeqRecord, StepRecord
from sim.cost.models import get_model
from sim.results.alloc_log import architecture

FORMAT, FORMAT_VERSION = "pagedsim-step-calibration", 1
# (decodes, decode context, prefill new tokens, cached prefix[, chunks]): one point each; the
# optional fifth field is how many sequences run such a chunk (1 where absent), as a
# max_num_batched_tokens of 4,096 or more schedules two or more prompts in one step.
Point = tuple[int, ...]


def chunks_of(point: Point) -> int:
    """Prefill chunks of a point: its fifth field, else 1 if it has new tokens."""
    return point[4] if len(point) > 4 else int(point[2] > 0)


def _grid(batches: list[int], contexts: list[int], chunks: list[int], prefixes: list[int],
          mixed: list[tuple[int, int, int]], max_tokens: int) -> list[Point]:
    decode = [(b, c, 0, 0) for b in batches for c in contexts if b * c <= max_tokens]
    prefill = [(0, 0, n, p) for n in chunks for p in prefixes]
    return decode + prefill + [(b, c, n, 0) for b, c, n in mixed]


GRIDS: dict[str, list[Point]] = {
    "full": _grid([1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
                  [128, 512, 1024, 2048, 4096, 8192, 16384, 32768],
                  [16, 64, 128, 256, 512, 1024, 2048, 4096, 8192], [0, 1024, 4096, 16384],
                  [(b, c, n) for b in (4, 16, 64, 128) for c in (1024, 4096)
                   for n in (64, 256, 1024, 2048)], 1 << 19),
    # The fitting grid: decode, prefill and mixed shapes spread over batch and context.
    "fit": _grid([1, 4, 16, 48, 128, 256], [256, 2048, 8192], [32, 128, 512, 1536, 4096],
                 [0, 4096], [(b, c, n) for b in (8, 64) for c in (1024,) for n in (128, 1024)]
                 + [(32, 4096, 512), (200, 512, 256)], 1 << 20),
    # More prefill and mixed shapes (a second artefact beside a 'fit' one).
    "prefill": _grid([], [], [16, 96, 256, 384, 768, 1024, 2048, 3072], [0, 1024, 8192],
                     [(b, c, n) for b in (2, 16, 128) for c in (512, 4096)
                      for n in (32, 256, 2048)], 1 << 20),
    # Prefill and mixed steps on both sides of the grouped GEMM's tile switch (torch picks
    # 64 x 128 tiles while the rows per expert average <= 128, else 128 x 256): 512 tokens for
    # Mixtral's top-2 of 8 experts, 2,048 for Qwen3-30B-A3B's top-8 of 128.
    "moe_edge": _grid([], [], [448, 480, 496, 512, 528, 576, 640, 896, 1280, 1792, 2048, 2304],
                      [0, 2048], [(16, 2048, 496), (64, 1024, 448), (8, 1024, 1792),
                                  (32, 2048, 2048)], 1 << 20),
    # Chunked prefill beside decodes: the chunk over a cached prefix (the second and later
    # chunks of a long prompt), as a max_num_batched_tokens budget cuts them.
    "chunked": [(b, c, n - b, p) for b in (1, 4, 16, 32) for c in (1024, 2048)
                for n in (256, 512) for p in (512, 1536)],
    # Short prompts beside a few short decodes (the commonest mixed steps of decode-heavy
    # serving; the other grids' mixed points have longer contexts or many decodes).
    "mixed_short": [(b, c, n, 0) for b in (1, 2, 4, 8, 16, 32) for c in (256, 512)
                    for n in (128, 256, 384)],
    # Row counts no other grid has (measured after the linear curve was fitted, to test it
    # where it interpolates): decodes, prefills between and beside the MoE tile switch, mixed.
    "fresh": _grid([2, 8, 24, 64, 96], [1024], [200, 416, 472, 488, 504, 520, 560, 704, 960,
                                                1152, 1600], [0, 1024],
                   [(8, 1024, 464), (32, 1024, 440), (4, 2048, 1000), (24, 512, 232)], 1 << 20),
    # Every CUDA-graph capture size from 136 to 512 rows, as a prefill and as 8 decodes beside
    # a chunk: steps of up to 512 tokens run their GEMMs at exactly these row counts, and
    # cuBLAS's choices vary between neighbours (Llama-3-8B's gate/up GEMM: 277 us at 448 rows,
    # 166-186 at 432-464), which only the linear curve at that row count can follow.
    "capture": [pt for s in (*range(136, 256, 8), *range(256, 513, 16))
                for pt in ((0, 0, s, 0), (8, 1024, s - 8, 0))],
    # Steps longer than the other grids reach, as a max_num_batched_tokens of 8,192 or more
    # schedules them: two to four prompts of 1-4 K tokens beside decodes, single chunks of
    # 6-8 K over short and long prefixes, and a few decodes over 8-16 K tokens each (the
    # conversations of a long-context trace). The H200's prefill-heavy steps of two 2,048-token
    # prompts, priced by the mixed kind's fit from points of at most 2,176 tokens, ran 12-14 %
    # slower than predicted (benchmarks/RESULTS.md, "Long steps").
    "long": [(0, 0, 6144, 0), (0, 0, 8192, 0), (0, 0, 6144, 8192), (0, 0, 8192, 512),
             (0, 0, 2048, 0, 2), (0, 0, 2048, 512, 4), (1, 2048, 2048, 0, 2),
             (4, 4096, 2048, 0, 2), (16, 2048, 2048, 0, 2), (2, 8192, 1024, 0, 4),
             (4, 8192, 4096, 512, 2), (2, 8192, 2048, 512, 3), (4, 4096, 4096, 0),
             (4, 8192, 8192, 512), (2, 16384, 6144, 1024), (8, 4096, 3072, 0, 2),
             *[(b, c, 0, 0) for b in (2, 4, 6) for c in (8192, 16384)]],
    # Small decode batches a second time at each row count 2-16, so that the linear curve's
    # value there rests on two points (one point alone is not trusted): Mixtral-8x7B's
    # decodes of two sequences ran 14 % slower than the fit, which had one such point.
    "small_decode": [(b, c, 0, 0) for b in (2, 3, 6, 12) for c in (512, 2048)],
    "smoke": _grid([1, 8, 64, 256], [512, 4096], [512, 2048], [0, 4096], [(16, 1024, 512)],
                   1 << 19),
    "tiny": [*_grid([1, 3], [5], [6], [0, 7], [(2, 9, 5)], 1 << 10), (1, 5, 3, 2, 2)],
}
POINT_FIELDS = {
    "kind": "decode, prefill or mixed",
    "num_decode / decode_context": "decoding sequences and the tokens each has cached",
    "prefill_new / prefill_prefix": "a chunk's new tokens and the tokens cached before it",
    "num_prefill": "sequences running such a chunk (absent in older artefacts: 1 if "
                   "prefill_new else 0)",
    **{k: v for k, v in STEP_FIELDS.items() if k not in ("class", "logged_attention_s")},
}


def preset_architecture(name: str) -> Architecture:
    """A sim preset (dense or MoE) as an Architecture: the fields of the allocation log's
    header (sim/results/alloc_log.py), read the way kernels.execute reads a log."""
    m = get_model(name)
    fields = {"name": m.name, "num_layers": m.num_layers, "num_heads": m.num_heads,
              "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim, "dtype": m.dtype,
              "kv_cache_dtype": "auto", "sliding_window": m.sliding_window, **architecture(m)}
    return Architecture.from_header(fields, f"preset {name}")


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def pool_blocks(points: list[Point], block_size: int) -> int:
    """Blocks for the largest point, plus the null block 0."""
    return 1 + max(p[0] * _blocks(p[1] + 1, block_size)
                   + chunks_of(p) * _blocks(p[3] + p[2], block_size) for p in points)


def synthetic_record(index: int, point: Point, num_blocks: int, block_size: int, vocab: int,
                     rng: random.Random) -> StepRecord:
    """The point as a step record: tables from a random permutation of blocks 1..N-1."""
    decodes, ctx, new, prefix = point[:4]
    spans = [(ctx, ctx + 1)] * decodes + [(prefix, prefix + new)] * chunks_of(point)
    ids = rng.sample(range(1, num_blocks), sum(_blocks(e, block_size) for _, e in spans))
    seqs = []
    for i, (start, end) in enumerate(spans):
        table, ids = ids[: _blocks(end, block_size)], ids[_blocks(end, block_size):]
        slots = [table[p // block_size] * block_size + p % block_size for p in range(start, end)]
        tokens = [rng.randrange(vocab) for _ in range(end - start)]
        seqs.append(SeqRecord(str(i), 0, start, end, tokens, table, slots))
    return StepRecord(index, 0, float("nan"), seqs, [], [], [], [], {}, [], 0, 0)


def _kind(point: Point) -> str:
    return "mixed" if point[0] and point[2] else ("decode" if point[0] else "prefill")


def run_grid(arch: Architecture, points: list[Point], device: torch.device, block_size: int,
             opts: ExecOptions, rows: list[dict[str, Any]], memory: dict[str, Any],
             kv_layers: int | None = None, deadline: float | None = None,
             skipped: list[str] | None = None) -> None:
    """Execute every point, appending its row to `rows` (kept if a later point fails or the
    `deadline` (time.monotonic) passes); a point that raises a RuntimeError is noted in
    `skipped` and passed over, unless it is the third failure in a row."""
    skipped = [] if skipped is None else skipped
    failures = 0
    num_blocks = pool_blocks(points, block_size)
    engine = Engine(arch, block_size, num_blocks, 0, device, seed=opts.seed, kv_layers=kv_layers,
                    reserve_bytes=6 * GiB)
    memory.update(engine.memory())
    rng = random.Random(opts.seed)
    for i, point in enumerate(points):
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"time budget spent after {i} of {len(points)} points")
        rec = synthetic_record(i, point, num_blocks, block_size, arch.vocab_size, rng)
        try:
            row = execute_record(engine, rec, opts)
        except RuntimeError as exc:  # torch's CUDA errors; three in a row end the grid
            skipped.append(f"point {point}: {exc}".splitlines()[0])
            print(f"calibrate: {skipped[-1]}", file=sys.stderr, flush=True)
            failures += 1
            if failures >= 3:
                raise
            continue
        failures = 0
        rows.append({"kind": _kind(point), "num_decode": point[0], "decode_context": point[1],
                     "prefill_new": point[2], "prefill_prefix": point[3],
                     "num_prefill": chunks_of(point), **row})
        print(format_row(rows[-1]), flush=True)


def format_row(row: dict[str, Any]) -> str:
    """One printed table line: graph vs eager per batch shape."""
    def ms(key: str) -> str:
        return "-" if row.get(key) is None else f"{row[key] * 1e3:9.3f}"

    shape = (f"{row['num_decode']}x{row['decode_context']}" if row["num_decode"] else "")
    if row["prefill_new"]:
        times = f"{row['num_prefill']}x" if row["num_prefill"] > 1 else ""
        shape += ("+" if shape else "") + f"{times}{row['prefill_new']}@{row['prefill_prefix']}"
    ratio = (f"{row['eager_s'] / row['graph_s']:6.2f}" if row.get("graph_s") else "     -")
    return (f"{row['kind']:<8} {shape:<16} {row['batch']['num_tokens']:>6} "
            f"{row['batch']['mode']:<9} {ms('graph_s')} {ms('eager_s')} {ratio} "
            f"{ms('attention_s')} {ms('linear_s')} {ms('other_s')}")


TABLE_HEADER = (f"{'kind':<8} {'shape':<16} {'tokens':>6} {'mode':<9} {'graph ms':>9} "
                f"{'eager ms':>9} {'e/g':>6} {'attn ms':>9} {'lin ms':>9} {'other ms':>9}")


def artefact(arch: Architecture, grid: str, block_size: int, device: torch.device,
             opts: ExecOptions, rows: list[dict[str, Any]], memory: dict[str, Any],
             error: str | None = None, skipped: list[str] | None = None) -> dict[str, Any]:
    """The calibration artefact (self-describing; see kernels/execute/README.md)."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION,
            "about": "step times of synthetic batches through pagedsim's executed forward "
                     "(kernels/execute); seconds; one point per line of 'points'",
            "complete": error is None and not skipped, "error": error,
            "skipped": skipped or [], "model": arch.to_json(),
            "dtype": arch.dtype, "kv_cache_dtype": arch.kv_cache_dtype,
            "block_size": block_size, "tp": 1, "grid": grid, **environment(device),
            "memory": memory, "options": opts.to_json(), "method": METHOD,
            "point_fields": POINT_FIELDS, "points": rows}


def _architecture(args: argparse.Namespace) -> Architecture:
    if args.model_json:
        path = Path(args.model_json)
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--model-json {path}: cannot read ({exc})") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"--model-json {path}: expected a JSON object")
        arch = Architecture.from_hf_config(cfg, str(path))
    else:
        arch = preset_architecture(args.model)
    kv = kv_cache_dtype(args.kv_cache_dtype, arch.dtype, "--kv-cache-dtype", "value")
    return replace(arch, kv_cache_dtype=kv)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", default="Llama-3-8B", help="a sim preset (dense)")
    src.add_argument("--model-json", help="an HF config.json (dense or MoE)")
    ap.add_argument("--grid", choices=sorted(GRIDS), default="full")
    ap.add_argument("--out", required=True, help="the artefact's path (JSON)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--kv-cache-dtype", default="auto",
                    help="auto (the model dtype) or fp8 / fp8_e4m3 (e4m3 caches, scales 1.0)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kv-layers", type=int, help="KV caches allocated (default: all that fit)")
    ap.add_argument("--no-parts", action="store_true", help="skip the per-part graphs")
    ap.add_argument("--time-budget", type=float, help="seconds; stop starting points after "
                    "this (the grid runs in a seeded shuffled order, so a cut keeps a spread)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("calibrate: --device cuda: no CUDA device (use --device cpu)", file=sys.stderr)
        return 2
    try:
        arch = _architecture(args)
    except ValueError as exc:
        print(f"calibrate: {exc}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    opts = ExecOptions(seed=args.seed, timing=TimingOptions(parts=not args.no_parts))
    print(f"calibrate {arch.name} ({arch.dtype}, kv {arch.kv_cache_dtype}) grid {args.grid} on "
          f"{device}\n{TABLE_HEADER}")
    rows: list[dict[str, Any]] = []
    memory: dict[str, Any] = {}
    error = None
    skipped: list[str] = []
    points = list(GRIDS[args.grid])
    if args.time_budget is not None:
        random.Random(args.seed).shuffle(points)
    deadline = None if args.time_budget is None else time.monotonic() + args.time_budget
    try:
        run_grid(arch, points, device, args.block_size, opts, rows, memory, args.kv_layers,
                 deadline, skipped)
    except (RuntimeError, ValueError, TimeoutError) as exc:  # CUDA errors are RuntimeErrors
        error = f"point {len(rows)}: {type(exc).__name__}: {exc}".splitlines()[0]
        print(f"calibrate: {error}", file=sys.stderr)
    with AtomicWriter(args.out) as out:
        out.write(json.dumps(artefact(arch, args.grid, args.block_size, device, opts, rows,
                                      memory, error, skipped), indent=1) + "\n")
    incomplete = error is not None or bool(skipped)
    print(f"wrote {len(rows)} points to {args.out}" + (" (incomplete)" if incomplete else ""))
    return 1 if incomplete else 0


if __name__ == "__main__":
    raise SystemExit(main())
