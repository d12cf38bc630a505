"""Attention of one logged step through the paged kernels, against a float64 reference.

Scheduled sequences with one new token go through `paged_decode_attention`, chunks of new
tokens through `paged_prefill_attention` (causal, aligned to the end of the context, with the
model's sliding window; chunks of up to 16 tokens run as split-K items). The reference attends
each query over the sequence's own contiguous K/V rows (`state.SeqState`), built
from its logical tokens, never from the paged cache. The error metric is the kernels':
max|out - ref| / max|ref| per (sequence, head), bounded by `kernels.testing.TOLERANCE`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from kernels.cache_layout import cache_rows
from kernels.decode_attention import paged_decode_attention
from kernels.launch import as_block_tables
from kernels.prefill_attention import paged_prefill_attention
from kernels.reference import rel_error_per_seq_head
from kernels.validate.log import SeqRecord, StepRecord
from kernels.validate.ops import ValidationError, attended_from
from kernels.validate.state import Replay

REF_BYTES = 1 << 28  # float64 score block budget per reference chunk


@dataclass(slots=True)
class Batch:
    """The kernel calls of one step: decode queries and packed prefill chunks."""

    dec_q: list[torch.Tensor]
    dec_tables: list[list[int]]
    dec_lens: list[int]
    dec_owner: list[int]
    pre_q: list[torch.Tensor]
    pre_tables: list[list[int]]
    pre_lens: list[int]
    pre_starts: list[int]
    pre_owner: list[int]


def build_batch(rp: Replay, rec: StepRecord, window: int | None = None) -> Batch:
    """Queries and tables for every scheduled sequence (`owner` = index into rec.seqs)."""
    b = Batch([], [], [], [], [], [], [], [0], [])
    for i, s in enumerate(rec.seqs):
        if s.num_new == 0:
            continue
        st = rp.seqs[s.request_id]
        q = rp.content.q_rows(st.hashes[s.start:s.end])
        if s.num_new == 1:
            for j in range(s.num_new):
                b.dec_q.append(q[j:j + 1])
                b.dec_tables.append(s.block_table)
                b.dec_lens.append(s.start + j + 1)
                b.dec_owner.append(i)
        else:
            b.pre_q.append(q)
            b.pre_tables.append(s.block_table)
            b.pre_lens.append(s.end)
            b.pre_starts.append(b.pre_starts[-1] + s.num_new)
            b.pre_owner.extend([i] * s.num_new)
    return b


def prepare(rp: Replay, b: Batch) -> dict[str, torch.Tensor]:
    """Device tensors for the kernel calls, built once (so timing sees only the kernels)."""
    dev = rp.k_cache.device
    t: dict[str, torch.Tensor] = {}
    if b.dec_q:
        t["dec_q"] = torch.cat(b.dec_q)
        t["dec_tables"] = as_block_tables(b.dec_tables, dev)
        t["dec_lens"] = torch.tensor(b.dec_lens, dtype=torch.int32, device=dev)
    if b.pre_q:
        t["pre_q"] = torch.cat(b.pre_q)
        t["pre_tables"] = as_block_tables(b.pre_tables, dev)
        t["pre_starts"] = torch.tensor(b.pre_starts, dtype=torch.int32, device=dev)
        t["pre_lens"] = torch.tensor(b.pre_lens, dtype=torch.int32, device=dev)
    return t


def _gathered(rp: Replay, table: list[int], ctx: int, lo: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Cache rows of positions [lo, ctx) through `table`, zero below `lo` (never attended)."""
    slots = torch.as_tensor(rp.slots_of(table, lo, ctx), device=rp.k_cache.device)
    out = []
    for cache in (rp.k_cache, rp.v_cache):
        rows = torch.zeros((ctx, *cache.shape[2:]), dtype=cache.dtype, device=cache.device)
        rows[lo:] = cache_rows(cache, slots)
        out.append(rows)
    return out[0], out[1]


def run_torch(rp: Replay, b: Batch, t: dict[str, torch.Tensor], window: int | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Backend `torch`: float64 attention over rows gathered from the cache via the tables.

    For checking big logs on a CPU quickly (the Triton interpreter is slow on long contexts):
    it exercises the replay (tables, slots, copies, swaps, writes) but not the attention
    kernels, and it is never timed. Only attended positions are gathered.
    """
    sc = (rp.k_scale, rp.v_scale)
    dec = [reference(q, *_gathered(rp, tab, ctx, 0 if window is None else
                                   max(0, ctx - window)), ctx - 1, window, *sc)
           for q, tab, ctx in zip(b.dec_q, b.dec_tables, b.dec_lens)]
    pre = [reference(q, *_gathered(rp, tab, ctx, 0), ctx - q.shape[0], window, *sc)
           for q, tab, ctx in zip(b.pre_q, b.pre_tables, b.pre_lens)]
    c = rp.content
    empty = torch.empty((0, c.num_heads, c.head_dim), dtype=torch.float64, device=c.device)
    return (torch.cat(dec) if dec else empty), (torch.cat(pre) if pre else empty)


def run_kernels(rp: Replay, b: Batch, t: dict[str, torch.Tensor], window: int | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode and prefill outputs of the Triton kernels (empty where a kind is absent)."""
    c = rp.content
    empty = torch.empty((0, c.num_heads, c.head_dim), dtype=c.dtype, device=c.device)
    dec, pre = empty, empty
    sc = {"k_scale": rp.k_scale, "v_scale": rp.v_scale}
    if b.dec_q:
        dec = paged_decode_attention(t["dec_q"], rp.k_cache, rp.v_cache, t["dec_tables"],
                                     t["dec_lens"], sliding_window=window,
                                     max_context_len=max(b.dec_lens), **sc)
    if b.pre_q:
        new = [e - s for s, e in zip(b.pre_starts, b.pre_starts[1:])]
        pre = paged_prefill_attention(t["pre_q"], rp.k_cache, rp.v_cache, t["pre_tables"],
                                      t["pre_starts"], t["pre_lens"], max_new_tokens=max(new),
                                      sliding_window=window, **sc)
    return dec, pre


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first_pos: int,
              window: int | None, k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """float64 attention of queries at positions first_pos.. over contiguous keys 0..ctx-1
    (rows of an fp8 cache times their scales)."""
    n, hq, d = q.shape
    ctx, hkv = k.shape[0], k.shape[1]
    lo = 0 if window is None else max(0, first_pos - window + 1)
    k64, v64 = k[lo:].double() * k_scale, v[lo:].double() * v_scale
    keys = torch.arange(lo, ctx, device=q.device)
    rows = max(1, REF_BYTES // (8 * hq * max(1, ctx - lo)))
    out = torch.empty((n, hq, d), dtype=torch.float64, device=q.device)
    for a in range(0, n, rows):
        qs = q[a:a + rows].double().reshape(-1, hkv, hq // hkv, d)
        pos = torch.arange(first_pos + a, first_pos + a + qs.shape[0], device=q.device)
        visible = keys[None, :] <= pos[:, None]
        if window is not None:
            visible &= keys[None, :] > pos[:, None] - window
        scores = torch.einsum("nkgd,tkd->kgnt", qs, k64) * d**-0.5
        probs = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
        out[a:a + rows] = torch.einsum("kgnt,tkd->nkgd", probs, v64).reshape(-1, hq, d)
    return out


def reference_batch(rp: Replay, rec: StepRecord, b: Batch, window: int | None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """References in the layout of `run_kernels`' outputs."""
    c = rp.content
    dec = torch.empty((len(b.dec_q), c.num_heads, c.head_dim), dtype=torch.float64,
                      device=c.device)
    sc = (rp.k_scale, rp.v_scale)
    for j, (q, ctx, i) in enumerate(zip(b.dec_q, b.dec_lens, b.dec_owner)):
        st = rp.seqs[rec.seqs[i].request_id]
        dec[j:j + 1] = reference(q, st.k[:ctx], st.v[:ctx], ctx - 1, window, *sc)
    pre = [reference(q, rp.seqs[rec.seqs[i].request_id].k[:ctx],
                     rp.seqs[rec.seqs[i].request_id].v[:ctx], ctx - q.shape[0], window, *sc)
           for q, ctx, i in zip(b.pre_q, b.pre_lens, dict.fromkeys(b.pre_owner))]
    empty = torch.empty((0, c.num_heads, c.head_dim), dtype=torch.float64, device=c.device)
    return dec, torch.cat(pre) if pre else empty


def compare(rp: Replay, rec: StepRecord, b: Batch, outs: tuple[torch.Tensor, torch.Tensor],
            refs: tuple[torch.Tensor, torch.Tensor], tol: float, window: int | None) -> float:
    """Max error of the step; raises ValidationError on the worst sequence beyond `tol`."""
    out, ref = torch.cat(outs), torch.cat(refs)
    if out.shape[0] == 0:
        return 0.0
    owner = torch.tensor(b.dec_owner + b.pre_owner, dtype=torch.int64, device=out.device)
    errs = rel_error_per_seq_head(out, ref, owner).nan_to_num(nan=float("inf"), posinf=float("inf"))
    per_seq = errs.amax(dim=1).cpu()
    absent = torch.ones(per_seq.shape[0], dtype=torch.bool)
    absent[owner.unique().cpu()] = False
    per_seq[absent] = 0.0
    worst = int(per_seq.argmax())
    err = float(per_seq[worst])
    if not err <= tol:
        s = rec.seqs[worst]
        head = int(errs[worst].argmax())
        raise ValidationError("attention", rec.step, f"(log line {rec.line}) request "
                              f"{s.request_id} sample {s.sample}: attention error {err:.3g} > "
                              f"{tol:g} (head {head}); {diagnose(rp, s, window)}")
    return err


def diagnose(rp: Replay, s: SeqRecord, window: int | None) -> str:
    """Where the cache, read through the block table, first differs from the expected rows."""
    st = rp.seqs[s.request_id]
    lo = attended_from(s, window)
    slots = torch.as_tensor(rp.slots_of(s.block_table, lo, s.end), device=rp.k_cache.device)
    k = cache_rows(rp.k_cache, slots).reshape(len(slots), -1).float()
    v = cache_rows(rp.v_cache, slots).reshape(len(slots), -1).float()
    want_k = st.k[lo:s.end].reshape(len(slots), -1).float()
    want_v = st.v[lo:s.end].reshape(len(slots), -1).float()
    same = ((k == want_k) | (k.isnan() & want_k.isnan())).all(1) & (v == want_v).all(1)
    bad = (~same).nonzero().flatten().tolist()
    table = f"block table {s.block_table}"
    if not bad:
        return f"the cache holds the expected rows (a kernel error?); {table}"
    pos = lo + bad[0]
    blk = s.block_table[pos // rp.block_size]
    return (f"first wrong K/V at position {pos} (block {blk}, table index "
            f"{pos // rp.block_size}), {len(bad)} wrong positions; {table}")


def time_step(rp: Replay, b: Batch, t: dict[str, torch.Tensor], window: int | None,
              reps: int) -> tuple[float, str]:
    """GPU seconds of the step's attention kernels on CUDA, and how they were measured.

    The step's launches are captured in a CUDA graph and replayed `reps` times between two
    events (`graph`), so the figure is kernel time, as in an engine that replays graphs:
    eager launches of small decode batches would measure Python launch latency instead.
    If capture fails, the median of `reps` eager runs between events is used (`eager`).
    """
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run_kernels(rp, b, t, window)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            run_kernels(rp, b, t, window)
        graph.replay()
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / reps, "graph"
    except RuntimeError:
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        run_kernels(rp, b, t, window)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times), "eager"
