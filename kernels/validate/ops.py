"""One logged step, replayed on the paged cache: structural checks, tokens, copies, swaps, writes.

Order within a step (the log keeps copies and swaps in separate lists, so the order is ours):

    1. slot check: every logged slot equals table[pos // bs] * bs + pos % bs (computed here)
    2. copies whose destination no scheduled sequence holds (made before a swap-out, for a
       sequence the swap-out then took away), swap-outs, swap-ins, then the other copies,
       each batch through copy_blocks / swap_kv, so they land before the step's writes
    3. each sequence's tokens: earlier positions from what the validator already knows
       (its own earlier steps, its fork parent, or the prefix hit's `token_ids`), new ones
       from the log; their K/V rows written with reshape_and_cache through the logged slots
       (queued: one call covers a run of steps, flushed before copies, swaps and attention)
    4. (attention, kernels/validate/attn.py), then forks copy the parent's tokens and
       frees forget finished or dropped sequences (a preempted one keeps its tokens).
"""

from __future__ import annotations

import numpy as np

from kernels.copy_blocks import copy_blocks
from kernels.swap import swap_kv
from kernels.validate.log import LogHeader, SeqRecord, StepRecord
from kernels.validate.state import Replay


class ValidationError(Exception):
    """A mismatch: the allocator's decisions do not reproduce the sequence's attention."""

    def __init__(self, kind: str, step: int, message: str) -> None:
        super().__init__(f"step {step}: {message}")
        self.kind = kind
        self.step = step


def _fail(rec: StepRecord, kind: str, message: str) -> ValidationError:
    return ValidationError(kind, rec.step, f"(log line {rec.line}) {message}")


def attended_from(seq: SeqRecord, window: int | None) -> int:
    """First position any new token of `seq` attends to (0 without a sliding window)."""
    return 0 if window is None else max(0, seq.start - window + 1)


def check_slots(header: LogHeader, rec: StepRecord, num_cpu_blocks: int) -> None:
    """Slot mappings against block tables, block ids in range, no slot written twice."""
    bs, nblocks = header.block_size, header.num_gpu_blocks
    written: set[int] = set()
    for s in rec.seqs:
        who = f"request {s.request_id} sample {s.sample}"
        need = -(-s.end // bs)
        if len(s.block_table) < need:
            raise _fail(rec, "slots", f"{who}: block table has {len(s.block_table)} blocks, "
                        f"context {s.end} needs {need}")
        bad = [b for b in s.block_table if not 0 <= b < nblocks]
        if bad:
            raise _fail(rec, "slots", f"{who}: block ids {bad[:4]} outside [0, {nblocks})")
        lo = attended_from(s, header.sliding_window) // bs
        nulls = [i for i in range(lo, need) if s.block_table[i] == 0]
        if nulls:
            raise _fail(rec, "slots", f"{who}: null block 0 at table index {nulls[0]} inside "
                        f"the attended range; block table {s.block_table}")
        for i, pos in enumerate(range(s.start, s.end)):
            want = s.block_table[pos // bs] * bs + pos % bs
            if s.slot_mapping[i] != want:
                raise _fail(rec, "slots", f"{who}: position {pos} logged at slot "
                            f"{s.slot_mapping[i]}, block table gives {want} (block "
                            f"{s.block_table[pos // bs]}); block table {s.block_table}")
        dup = written.intersection(s.slot_mapping)
        if dup:
            raise _fail(rec, "slots", f"{who}: slot {min(dup)} written twice in one step")
        written.update(s.slot_mapping)
    _check_moves(rec, nblocks, num_cpu_blocks)


def _check_moves(rec: StepRecord, nblocks: int, ncpu: int) -> None:
    for src, dst in rec.copies:
        if not (0 < src < nblocks and 0 < dst < nblocks) or src == dst:
            raise _fail(rec, "slots", f"copy ({src}, {dst}) outside [1, {nblocks}) or onto itself")
    for name, swaps, (na, nb) in (("swap_out", rec.swap_out, (nblocks, ncpu)),
                                  ("swap_in", rec.swap_in, (ncpu, nblocks))):
        for rid, pairs in swaps:
            if any(not (0 <= a < na and 0 <= b < nb) for a, b in pairs):
                raise _fail(rec, "slots", f"{name} of request {rid}: block ids outside the "
                            f"pools ({nblocks} GPU, {ncpu} CPU blocks)")


def _copy_batches(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Split a copy plan into batches copy_blocks may run concurrently (order kept)."""
    batches: list[list[tuple[int, int]]] = []
    srcs: set[int] = set()
    dsts: set[int] = set()
    for src, dst in pairs:
        if not batches or dst in srcs or src in dsts or dst in dsts:
            batches.append([])
            srcs, dsts = set(), set()
        batches[-1].append((src, dst))
        srcs.add(src)
        dsts.add(dst)
    return batches


def _copies(rp: Replay, pairs: list[tuple[int, int]]) -> None:
    for batch in _copy_batches(pairs):
        copy_blocks(rp.k_cache, rp.v_cache, batch)
        rp.shadow_copy(batch, False, False)


def apply_moves(rp: Replay, rec: StepRecord) -> None:
    """Copies and swaps of the step, in the order of the module docstring."""
    if rec.copies or rec.swap_out or rec.swap_in:
        rp.flush()
    held = {b for s in rec.seqs for b in s.block_table}
    early = [c for c in rec.copies if rec.swap_out and c[1] not in held]
    late = [c for c in rec.copies if not (rec.swap_out and c[1] not in held)]
    _copies(rp, early)
    if (rec.swap_out or rec.swap_in) and rp.k_cpu is None:
        raise _fail(rec, "slots", "swaps logged but the header has num_cpu_blocks = 0")
    for _, pairs in rec.swap_out:
        if pairs:
            swap_kv((rp.k_cache, rp.v_cache), (rp.k_cpu, rp.v_cpu), pairs)  # type: ignore[arg-type]
            rp.shadow_copy(pairs, False, True)
    for _, pairs in rec.swap_in:
        if pairs:
            swap_kv((rp.k_cpu, rp.v_cpu), (rp.k_cache, rp.v_cache), pairs)  # type: ignore[arg-type]
            rp.shadow_copy(pairs, True, False)
    _copies(rp, late)


def _known_prefix(rp: Replay, rec: StepRecord, s: SeqRecord, window: int | None) -> None:
    """Make the sequence's state cover positions [0, s.start) before its new tokens."""
    st = rp.seqs.setdefault(s.request_id, rp.new_state())
    known = len(st)
    if s.start < known:
        _check_same(rec, s, st.tokens[s.start:min(known, s.end)], s.token_ids, "earlier steps")
        st.truncate(s.start)
        return
    if s.start == known:
        return
    hit = rec.hit_tokens.get(s.request_id)
    if hit is not None and len(hit) >= s.start:
        _check_same(rec, s, st.tokens[:known], hit[:known], "its prefix hit's token_ids")
        rp.extend(st, hit[known:s.start])
        return
    hashes = rp.shadow[rp.slots_of(s.block_table, known, s.start)]
    lo = attended_from(s, window)
    if s.start > 0 and (hashes[-1] == 0 or not hashes[max(0, lo - known):].all()):
        raise _fail(rec, "tokens", f"request {s.request_id}: positions {known}..{s.start - 1} "
                    f"are neither logged nor written in its blocks {s.block_table}")
    rp.adopt_hashes(st, hashes)


def _check_same(rec: StepRecord, s: SeqRecord, known: list[int], logged: list[int],
                what: str) -> None:
    for i, (a, b) in enumerate(zip(known, logged)):
        if a >= 0 and a != b:
            raise _fail(rec, "tokens", f"request {s.request_id}: token {i} differs from "
                        f"{what} ({b} vs {a})")


def write_tokens(rp: Replay, rec: StepRecord, window: int | None) -> None:
    """Extend every scheduled sequence by its new tokens and queue their K/V writes."""
    for s in rec.seqs:
        _known_prefix(rp, rec, s, window)
        hashes, k, v = rp.extend(rp.seqs[s.request_id], s.token_ids)
        rp.queue_write(np.asarray(s.slot_mapping, dtype=np.int64), hashes, k, v)


def after_step(rp: Replay, rec: StepRecord) -> None:
    """Forks copy the parent's tokens; finished or dropped sequences are forgotten."""
    for parent, child in rec.forks:
        if parent not in rp.seqs:
            raise _fail(rec, "tokens", f"fork of unknown parent {parent} into {child}")
        rp.seqs[child] = rp.seqs[parent].clone()
    for rid, reason in rec.frees:
        if reason != "preempted":
            rp.seqs.pop(rid, None)
