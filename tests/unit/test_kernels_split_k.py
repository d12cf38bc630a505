"""The device-built work list of kernels/split_k.py, read back through a probe kernel (CPU).

A probe program per item index runs `batch_chunk`, `locate` and `split_bounds` exactly as the
attention programs do and stores what it found; the test checks the list against the rule
written out directly: equal items per sequence covering its keys once, about `target` items
over the batch, the uniform rule of `choose_num_splits`, and -1 past the end.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton
import triton.language as tl

from kernels.attention_core import key_lo
from kernels.decode_config import DecodeConfig, choose_num_splits, min_chunk
from kernels.launch import for_device
from kernels.split_k import batch_chunk, locate, num_items, split_bounds


@triton.jit
def _probe(out_ptr, lens_ptr, num_seqs, target, target_ragged, least, forced, window,
           BLOCK_N: tl.constexpr, SEQ_TILE: tl.constexpr, USE_WINDOW: tl.constexpr):
    item = tl.program_id(0)
    chunk = batch_chunk(lens_ptr, lens_ptr, num_seqs, target, target_ragged, least, window, 0,
                        1, False, USE_WINDOW, False, BLOCK_N, SEQ_TILE)
    seq, first = locate(item, chunk, lens_ptr, lens_ptr, num_seqs, least, forced, window, 0,
                        False, USE_WINDOW, False, BLOCK_N, SEQ_TILE)
    ctx = tl.load(lens_ptr + tl.maximum(seq, 0))
    lo = key_lo(ctx - 1, window, 0, USE_WINDOW, False)
    n = num_items(ctx - lo, chunk, least, forced, BLOCK_N)
    start, end = split_bounds(lo, ctx, item - first, n, BLOCK_N)
    tl.store(out_ptr + item * 4 + tl.arange(0, 4),
             tl.where(tl.arange(0, 4) == 0, seq, tl.where(tl.arange(0, 4) == 1, chunk,
                      tl.where(tl.arange(0, 4) == 2, start, end))))


def _work_list(lens, target, target_ragged=None, least=16, forced=0, window=0, block_n=16):
    lens_t = torch.tensor(lens, dtype=torch.int32)
    items = 4 * len(lens) + target
    out = torch.full((items, 4), -7, dtype=torch.int32)
    tile = int(triton.next_power_of_2(len(lens)))
    for_device(_probe, lens_t.device)[(items,)](
        out, lens_t, len(lens), target, target_ragged or target, least, forced, window,
        BLOCK_N=block_n, SEQ_TILE=min(tile, 4), USE_WINDOW=window > 0)
    return out.tolist()


def _expected_chunk(spans, target, least, block_n=16):
    chunk = max(-(-sum(spans) // target), least)
    return -(-chunk // block_n) * block_n


@pytest.mark.parametrize("lens", [[37, 5, 200, 64, 1, 130, 17], [64] * 6])
def test_items_cover_every_key_once(lens):
    """Each sequence's items are consecutive, whole tiles within one tile of each other
    (<= chunk), and cover [0, ctx)."""
    rows = _work_list(lens, target=8)
    chunk = _expected_chunk(lens, 8, 16)
    found = [r for r in rows if r[0] >= 0]
    assert all(r[1] == chunk for r in found)
    for s, ctx in enumerate(lens):
        mine = [r for r in found if r[0] == s]
        n = min(-(-ctx // chunk), max(ctx // 16, 1))
        assert len(mine) == n
        assert mine[0][2] == 0 and mine[-1][3] == ctx
        assert all(a[3] == b[2] for a, b in itertools.pairwise(mine))
        sizes = [r[3] - r[2] for r in mine]
        assert max(sizes) - min(sizes) < 2 * 16 and max(sizes) <= chunk
    assert [r[0] for r in found] == sorted(r[0] for r in found)
    assert all(r[0] == -1 for r in rows[len(found):])


def test_ragged_batches_use_the_ragged_target():
    """A batch whose longest span exceeds 9/8 of the mean divides by target_ragged."""
    ragged = [400, 16, 16, 16]
    uniform = [112] * 4
    assert _work_list(ragged, 4, 16)[0][1] == _expected_chunk(ragged, 16, 16)
    assert _work_list(uniform, 4, 16)[0][1] == _expected_chunk(uniform, 4, 16)


def test_forced_splits_and_window():
    """`forced` fixes the count (at most one tile each); a window bounds the span."""
    rows = [r for r in _work_list([100, 20], 8, forced=3) if r[0] >= 0]
    assert [r[0] for r in rows] == [0, 0, 0, 1, 1]
    rows = [r for r in _work_list([300], 4, window=50) if r[0] >= 0]
    assert rows[0][2] == 250 and rows[-1][3] == 300


def test_uniform_rule_matches_the_host_statement():
    """choose_num_splits (the host's rule) gives the kernel's item count for uniform batches."""
    for batch, ctx in [(1, 600), (3, 1000), (8, 160), (2, 2048)]:
        rows = [r for r in _work_list([ctx] * batch, target=12, least=64) if r[0] == 0]
        cfg = DecodeConfig(block_n=16, min_tokens_per_split=64)
        host = choose_num_splits(batch, 1, ctx, 16, 4, min_tokens_per_split=64)
        assert len(rows) == host, (batch, ctx)
        assert min_chunk(cfg, ctx) == 64
    assert min_chunk(DecodeConfig(block_n=16), 100_000) == 1568  # at most 64 items
