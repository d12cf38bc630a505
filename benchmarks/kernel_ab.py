"""A/B sections of bench_kernels.py: fp8 variants against bf16, ragged split rules, host time.

Every section times its versions alternately in the same minutes (`alternate`: the median of
each version's per-round medians). fp8 variants differ in how e4m3 tiles become fp16
(`DecodeConfig.fp8_widen`) and in tile shape; ragged variants in the split rule's knobs. The
host section times the wrapper's own Python (the launch replaced by a no-op) on the same
tensors every call and on fresh q / out views every call, as a forward pass makes them.
Loaded by bench_kernels.py from this folder (benchmarks/ is not a package).
"""

from __future__ import annotations

import functools
import random
import statistics
import time

import torch

import kernels.attention as attention_module
import kernels.decode_attention as decode_module
from kernels.decode_attention import paged_decode_attention
from kernels.decode_config import DecodeConfig
from kernels.layer_timing import AttentionTimer, graph_us, host_us, median_us
from kernels.reference import Variant, ref_decode_attention, rel_error_per_seq_head
from kernels.reshape_and_cache import reshape_and_cache

FP8_SHAPES = ((64, 4096), (16, 16384))
FP8_VARIANTS = {
    "asmv64w2s2": DecodeConfig(block_n=64, num_warps=2, fp8_widen="asm_v"),
    "tab64w1s3": DecodeConfig(block_n=64, num_warps=1, num_stages=3, pipeline="table_asm"),
    # as many K/V bytes per tile and warp as the bf16 kernel moves (128-token tiles)
    "tab128w4s3": DecodeConfig(block_n=128, num_warps=4, num_stages=3, pipeline="table_asm"),
    "tab128w4s4": DecodeConfig(block_n=128, num_warps=4, num_stages=4, pipeline="table_asm"),
    "tab128w8s3": DecodeConfig(block_n=128, num_warps=8, num_stages=3, pipeline="table_asm"),
    "tab64w4s3": DecodeConfig(block_n=64, num_warps=4, num_stages=3, pipeline="table_asm"),
    "tab128w4s3cast": DecodeConfig(block_n=128, num_warps=4, num_stages=3, pipeline="table_asm",
                                   fp8_widen="cast"),
    "tab256w8s3": DecodeConfig(block_n=256, num_warps=8, num_stages=3, pipeline="table_asm"),
}
# Extends (16 new tokens a sequence): candidates beside the shipped extend configuration.
EXTEND_VARIANTS = {
    "64w4s2": DecodeConfig(block_n=64, num_warps=4, fused_reduce=False),
    "tab64w4s4": DecodeConfig(block_n=64, num_warps=4, num_stages=4, fused_reduce=False,
                              pipeline="table_asm"),
    "tab64w2s3": DecodeConfig(block_n=64, num_warps=2, num_stages=3, fused_reduce=False,
                              pipeline="table_asm"),
}
# Decode items inside a mixed launch (which runs with the query tiles' 4 warps and 3 stages).
MIXED_VARIANTS = {
    "d32w4": DecodeConfig(block_n=32, num_warps=4),
    "d32w4tab": DecodeConfig(block_n=32, num_warps=4, pipeline="table_asm"),
    "d64w4tab": DecodeConfig(block_n=64, num_warps=4, pipeline="table_asm"),
    "d16w4": DecodeConfig(block_n=16, num_warps=4),
}
MIXED_CASES = (([4096] * 64, [2048], [0]), ([2048] * 32, [512, 512], [4096, 0]),
               ([1024] * 128, [1024], [8192]))
# bf16 candidates, timed beside the shipped bf16 kernel in every A/B section
BF16_VARIANTS = {
    "tab64w2s3": DecodeConfig(block_n=64, num_warps=2, num_stages=3, pipeline="table_asm"),
    "tab32w2s4": DecodeConfig(block_n=32, num_warps=2, num_stages=4, pipeline="table_asm"),
}
RAGGED_VARIANTS = {
    "rag16": DecodeConfig(num_warps=2, ragged_programs_per_sm=16),
    "rag32": DecodeConfig(num_warps=2, ragged_programs_per_sm=32),
    **BF16_VARIANTS,
}


def alternate(fns: dict[str, object], rounds: int) -> dict[str, float]:
    """Median of `rounds` medians per version, versions timed in turn (A/B in the same minutes)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            times[k].append(median_us(fn, warmup=10, rep=40))
    return {k: statistics.median(v) for k, v in times.items()}


def errors(t: AttentionTimer, lens: list[int], configs: dict[str, DecodeConfig | None]
           ) -> dict[str, float]:
    """`call_errors` of the shipped decode under each config."""
    return call_errors(t, lens, {name: functools.partial(paged_decode_attention, config=cfg)
                                 for name, cfg in configs.items()})


def call_errors(t: AttentionTimer, lens: list[int], calls: dict[str, object]
                ) -> dict[str, float]:
    """max error per (sequence, head) of each decode (`paged_decode_attention`'s calling
    convention) against float64 over the dequantised cache, on the first 4 sequences of
    `lens` (the reference is computed once)."""
    lens = lens[:4]
    q, tables = t.queries(len(lens)), t.tables(lens)
    ref = ref_decode_attention(q, t.k, t.v, tables.tolist(), lens,
                               variant=Variant(k_scale=t.k_scale, v_scale=t.v_scale))
    ctx = torch.tensor(lens, dtype=torch.int32, device=q.device)
    res = {}
    for name, call in calls.items():
        out = torch.empty_like(q)
        call(q, t.k, t.v, tables, ctx, out=out, k_scale=t.k_scale, v_scale=t.v_scale)
        res[name] = float(rel_error_per_seq_head(out, ref).max())
    return res


def ab_row(batch: int, ctx: int, times: dict[str, float], errs: dict[str, float],
           **extra: float) -> dict:
    """One shape's row: each version's time, its speed-up over shipped bf16 (`*_x`), `extra`,
    and each error (`*_err64`)."""
    return {"batch": batch, "ctx": ctx, **{f"{k}_us": v for k, v in times.items()},
            **{f"{k}_x": times["bf16"] / v for k, v in times.items() if k != "bf16"},
            **extra, **{f"{k}_err64": v for k, v in errs.items()}}


def fp8_ab(t16: AttentionTimer, t8: AttentionTimer) -> list[dict]:
    """bf16 (shipped and BF16_VARIANTS), the default fp8 kernel and every FP8_VARIANTS entry,
    alternated, per shape; `*_x` = shipped bf16 time / that version's time."""
    rows = []
    for batch, ctx in FP8_SHAPES:
        lens = [ctx] * batch
        fns = {"bf16": t16.decode_call(lens), "fp8": t8.decode_call(lens)}
        fns.update({f"bf16_{k}": t16.decode_call(lens, config=c) for k, c in BF16_VARIANTS.items()})
        fns.update({k: t8.decode_call(lens, config=c) for k, c in FP8_VARIANTS.items()})
        times = alternate(fns, 5)
        errs = errors(t8, lens, {"fp8": None, **FP8_VARIANTS})
        row = ab_row(batch, ctx, times, errs, fp8_tbps=t8.kv_bytes(lens) / times["fp8"] / 1e6)
        rows.append(row)
        print(f"fp8_ab {row}", flush=True)
    return rows


# fp8 decodes over V stored transposed per block and over token-major V
LAYOUT_SHAPES = ((64, 4096), (16, 16384), (128, 2048), (256, 1024), (32, 8192), (1, 4096))
LAYOUT_VARIANTS = {
    "tab64w1s3": DecodeConfig(block_n=64, num_warps=1, num_stages=3, pipeline="table_asm"),
    "tab64w4s3": DecodeConfig(block_n=64, num_warps=4, num_stages=3, pipeline="table_asm"),
    "tab128w4s3": DecodeConfig(block_n=128, num_warps=4, num_stages=3, pipeline="table_asm"),
}


def fp8_layout_ab(t16: AttentionTimer, t8: AttentionTimer, t8tm: AttentionTimer
                  ) -> list[dict]:
    """The fp8 decode over transposed V (`t8`; `fp8`, and `fp8_<variant>`
    for LAYOUT_VARIANTS) against the same values stored token-major (`t8tm`: `fp8_tm`) and
    shipped bf16, alternated; then extends, a prefill and reshape_and_cache in both layouts.
    `*_x` = shipped bf16 time / that version's; `fp8_tbps` counts fp8 bytes."""
    rows = []
    shapes = [([c] * b, f"{b} x {c}") for b, c in LAYOUT_SHAPES]
    shapes.append((ragged_lens(64, 16, 8192), "64 x U[16, 8192]"))
    for lens, name in shapes:
        fns = {"bf16": t16.decode_call(lens), "fp8": t8.decode_call(lens),
               "fp8_tm": t8tm.decode_call(lens)}
        fns.update({f"fp8_{k}": t8.decode_call(lens, config=c)
                    for k, c in LAYOUT_VARIANTS.items()})
        times = alternate(fns, 5)
        errs = {**errors(t8, lens, {"fp8": None}), **errors(t8tm, lens, {"fp8_tm": None})}
        row = ab_row(len(lens), max(lens), times, errs,
                     fp8_tbps=t8.kv_bytes(lens) / times["fp8"] / 1e6)
        rows.append({"shape": name, **row})
        print(f"fp8_layout {rows[-1]}", flush=True)
    for new, prefix in (([16], [16384]), ([16] * 16, [16384] * 16), ([2048] * 8, [2048] * 8)):
        fns = {"bf16": t16.extend_call(new, prefix), "fp8": t8.extend_call(new, prefix),
               "fp8_tm": t8tm.extend_call(new, prefix)}
        times = alternate(fns, 5)
        rows.append({"shape": f"extend {len(new)} x {new[0]} over {prefix[0]}",
                     **{f"{k}_us": v for k, v in times.items()},
                     "fp8_vs_tm": times["fp8_tm"] / times["fp8"]})
        print(f"fp8_layout {rows[-1]}", flush=True)
    for tokens in (64, 16384):
        times = alternate({"fp8": cache_write_call(t8, tokens),
                           "fp8_tm": cache_write_call(t8tm, tokens)}, 5)
        rows.append({"shape": f"reshape_and_cache {tokens} tokens",
                     **{f"{k}_us": v for k, v in times.items()}})
        print(f"fp8_layout {rows[-1]}", flush=True)
    return rows


def cache_write_call(t: AttentionTimer, tokens: int):
    """reshape_and_cache of `tokens` new rows at distinct random slots of `t`'s cache."""
    s = t.shape
    key = torch.randn((tokens, s.num_kv_heads, s.head_size), device=t.device, dtype=s.dtype)
    value = torch.randn_like(key)
    slots = torch.randperm(t.k.shape[0] * s.block_size, device=t.device)[:tokens]
    return lambda: reshape_and_cache(key, value, t.k, t.v, slots, k_scale=t.k_scale,
                                     v_scale=t.v_scale)


def experiment_ab(tag: str, shapes: tuple[tuple[int, int], ...], t16: AttentionTimer,
                  t8: AttentionTimer, calls: dict[str, object]) -> list[dict]:
    """Shipped bf16 and fp8 decodes against an experiment's fp8 decodes (`calls`, in
    `paged_decode_attention`'s calling convention), alternated, per uniform shape."""
    rows = []
    for batch, ctx in shapes:
        lens = [ctx] * batch
        fns = {"bf16": t16.decode_call(lens), "fp8": t8.decode_call(lens),
               **{name: t8.decode_call(lens, fn=call) for name, call in calls.items()}}
        row = ab_row(batch, ctx, alternate(fns, 5), call_errors(t8, lens, calls))
        rows.append(row)
        print(f"{tag} {row}", flush=True)
    return rows


def head_major(t: AttentionTimer) -> tuple[torch.Tensor, torch.Tensor]:
    """t's K and V caches stored head-major, `[blocks, kv_heads, block_size, head_size]`
    (FlashInfer's HND), viewed as one-head caches of `blocks x kv_heads` blocks: block b of
    head h is block `b * kv_heads + h`, so the shipped kernel reads an HND cache unchanged."""
    def one(c: torch.Tensor) -> torch.Tensor:
        n, b, h, d = c.shape
        return c.permute(0, 2, 1, 3).contiguous().view(n * h, b, 1, d)
    return one(t.k), one(t.v)


def head_major_call(t: AttentionTimer, caches: tuple[torch.Tensor, torch.Tensor],
                    lens: list[int], **kw: object) -> tuple[object, object]:
    """A decode of `lens` over head-major `caches` as `len(lens) x kv_heads` one-head
    sequences (same queries, same keys), and a function giving its output as `[seqs, q_heads,
    head_size]` with the inputs of `t.decode_call`'s reference (q, tables)."""
    heads = t.shape.num_kv_heads
    q, tables = t.queries(len(lens)), t.tables(lens)
    q1 = q.view(len(lens) * heads, -1, q.shape[-1])
    hh = torch.arange(heads, device=tables.device, dtype=torch.int32)
    t1 = (tables[:, None, :] * heads + hh[None, :, None]).reshape(len(lens) * heads, -1)
    ctx = torch.tensor(lens, dtype=torch.int32, device=q.device).repeat_interleave(heads)
    out = torch.empty_like(q1)
    if t.kv_dtype != q.dtype:
        kw.update(k_scale=t.k_scale, v_scale=t.v_scale)
    most = max(lens)

    def fn() -> None:
        paged_decode_attention(q1, caches[0], caches[1], t1, ctx, max_context_len=most,
                               out=out, **kw)

    def output() -> torch.Tensor:
        fn()
        return out.view(q.shape)
    return fn, (q, tables, output)


def layout_ab(t16: AttentionTimer, t8: AttentionTimer) -> list[dict]:
    """The cache's layout: token-major (shipped, `[blocks, block_size, heads, head_size]`)
    against head-major (HND, each block's tokens of one head contiguous: 2 KB for fp8 at 16 x
    128 instead of 128-byte rows 1 KB apart), bf16 and fp8, alternated; `*_x` = shipped bf16
    time / that version's; err64 of head-major fp8 against float64."""
    rows = []
    hnd16, hnd8 = head_major(t16), head_major(t8)
    for batch, ctx in FP8_SHAPES + ((64, 2048), (256, 1024)):
        lens = [ctx] * batch
        h16, _ = head_major_call(t16, hnd16, lens)
        h8, (q, tables, out8) = head_major_call(t8, hnd8, lens)
        fns = {"bf16": t16.decode_call(lens), "fp8": t8.decode_call(lens), "bf16_hnd": h16,
               "fp8_hnd": h8}
        for k, c in (("fp8_hnd_tab64w1", FP8_VARIANTS["tab64w1s3"]),
                     ("bf16_hnd_tab64w2", BF16_VARIANTS["tab64w2s3"])):
            tt, cc = (t8, hnd8) if k.startswith("fp8") else (t16, hnd16)
            fns[k] = head_major_call(tt, cc, lens, config=c)[0]
        times = alternate(fns, 5)
        few = min(4, batch)
        ref = ref_decode_attention(q[:few], t8.k, t8.v, tables[:few].tolist(), lens[:few],
                                   variant=Variant(k_scale=t8.k_scale, v_scale=t8.v_scale))
        err = float(rel_error_per_seq_head(out8()[:few], ref).max())
        row = {"batch": batch, "ctx": ctx, **{f"{k}_us": v for k, v in times.items()},
               **{f"{k}_x": times["bf16"] / v for k, v in times.items() if k != "bf16"},
               **{f"{k}_tbps": (t8 if k.startswith("fp8") else t16).kv_bytes(lens) / v / 1e6
                  for k, v in times.items()},
               "fp8_hnd_err64": err}
        rows.append(row)
        print(f"layout_ab {row}", flush=True)
    return rows


def extend_ab(t16: AttentionTimer) -> list[dict]:
    """Extends of 16 new tokens over 16,384 cached (1 and 16 sequences): the shipped
    configuration and EXTEND_VARIANTS alternated with a decode reading the same KV, eager and
    under CUDA graphs; `*_x` = that version's time / the decode's (the target is <= 1.2)."""
    rows = []
    for num_seqs in (1, 16):
        new, prefix = [16] * num_seqs, [16384] * num_seqs
        fns = {"decode": t16.decode_call([16384 + 16] * num_seqs),
               "extend": t16.extend_call(new, prefix)}
        fns.update({k: t16.extend_call(new, prefix, decode_config=c)
                    for k, c in EXTEND_VARIANTS.items()})
        times = alternate(fns, 5)
        graphs = {k: graph_us(fn) for k, fn in fns.items()}
        row = {"seqs": num_seqs, **{f"{k}_us": v for k, v in times.items()},
               **{f"{k}_graph_us": v for k, v in graphs.items()},
               **{f"{k}_x": times[k] / times["decode"] for k in fns if k != "decode"},
               **{f"{k}_graph_x": graphs[k] / graphs["decode"] for k in fns if k != "decode"}}
        rows.append(row)
        print(f"extend_ab {row}", flush=True)
    return rows


def mixed_ab(t16: AttentionTimer) -> list[dict]:
    """Mixed batches in one launch (shipped, and MIXED_VARIANTS for the decode items) against
    the decode and prefill as two calls, alternated; `*_x` = one launch / two calls."""
    rows = []
    for dec, new, prefix in MIXED_CASES:
        d, p = t16.decode_call(dec), t16.extend_call(new, prefix)
        fns = {"mixed": t16.mixed_call(dec, new, prefix),
               "two_calls": lambda d=d, p=p: (d(), p())}
        fns.update({k: t16.mixed_call(dec, new, prefix, decode_config=c)
                    for k, c in MIXED_VARIANTS.items()})
        times = alternate(fns, 5)
        rows.append({"decodes": f"{len(dec)} x {dec[0]}", "chunks": list(zip(new, prefix)),
                     **{f"{k}_us": v for k, v in times.items()},
                     **{f"{k}_x": v / times["two_calls"] for k, v in times.items()
                        if k != "two_calls"}})
        print(f"mixed_ab {rows[-1]}", flush=True)
    return rows


def ragged_lens(n: int, lo: int, hi: int) -> list[int]:
    rng = random.Random(0)
    return [rng.randint(lo, hi) for _ in range(n)]


def wrapper_only_us(fn) -> float:
    """host_us of `fn` with the Triton launch replaced by a no-op: the wrapper's own Python."""

    class _NoLaunch:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    real = attention_module.for_device
    decode_module.clear_launch_cache()  # bound launches made before the patch would launch
    attention_module.for_device = lambda kernel, device: _NoLaunch()
    try:
        return host_us(fn, calls=2000)
    finally:
        attention_module.for_device = real
        decode_module.clear_launch_cache()


def _calls(t: AttentionTimer, lens: list[int]) -> tuple[object, object, object]:
    """(same tensors each call, fresh q / out views each call, the two views alone)."""
    q, tables = t.queries(len(lens)), t.tables(lens)
    ctx = torch.tensor(lens, dtype=torch.int32, device=q.device)
    out, most = torch.empty_like(q), max(lens)
    kw = {"k_scale": t.k_scale, "v_scale": t.v_scale, "max_context_len": most}
    same = lambda: paged_decode_attention(q, t.k, t.v, tables, ctx, out=out, **kw)
    fresh = lambda: paged_decode_attention(q[:], t.k, t.v, tables, ctx, out=out[:], **kw)
    return same, fresh, lambda: (q[:], out[:])


def host(t16: AttentionTimer, t8: AttentionTimer) -> list[dict]:
    """Wrapper Python per call (same tensors; fresh views minus the views' own cost) and the
    eager host time per call, three rounds each."""
    rows = []
    for name, t, lens in (("1x4096", t16, [4096]), ("64x4096", t16, [4096] * 64),
                          ("fp8 1x4096", t8, [4096])):
        same, fresh, views = _calls(t, lens)
        py, py_fresh, eager = [], [], []
        for _ in range(3):
            py.append(wrapper_only_us(same))
            py_fresh.append(wrapper_only_us(fresh) - host_us(views, calls=2000))
            eager.append(host_us(same))
        rows.append({"shape": name, "py_us": min(py), "py_fresh_us": min(py_fresh),
                     "host_us": min(eager), "py_all": py, "py_fresh_all": py_fresh})
        print(f"host {rows[-1]}", flush=True)
    return rows


class Dry:
    """Dry run for compiling in parallel: every timing call runs its function once, and only
    in worker `index` of `workers` (functions numbered in the order they are first seen,
    which is the same in every worker; they are kept alive so ids never repeat)."""

    def __init__(self, index: int, workers: int) -> None:
        self.index, self.workers, self.seen = index, workers, {}
        self.t0 = time.time()

    def __call__(self, fn, *args, **kwargs) -> float:
        if id(fn) not in self.seen:
            self.seen[id(fn)] = (len(self.seen), fn)
        if self.seen[id(fn)][0] % self.workers == self.index:
            fn()
        return float("nan")
