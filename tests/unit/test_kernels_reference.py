"""Tests of the torch references and the error metric (kernels/reference.py)."""

from __future__ import annotations

import math

import torch

from kernels.reference import gather_tokens, ref_decode_attention, rel_error_per_seq_head
from kernels.testing import make_block_tables, make_case


def test_gather_walks_the_block_table_token_by_token():
    """Token t comes from block table[t // block_size], row t % block_size."""
    cache = torch.arange(4 * 2 * 1 * 1, dtype=torch.float32).view(4, 2, 1, 1)
    rows = gather_tokens(cache, [3, 0, 2], range(5))
    assert rows.flatten().tolist() == [6, 7, 0, 1, 4]


def test_decode_reference_single_token_returns_its_value():
    """With one token of context the attention output is that token's value row."""
    case = make_case([1], 1, 16, 4, torch.float32, seed=3)
    q = torch.randn((1, 2, 16))
    out = ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, [1])
    block = case.block_tables[0][0]
    assert torch.allclose(out[0], case.v_cache[block, 0].double().expand(2, 16))


def test_error_metric_per_sequence_and_head_and_nan():
    """The metric is max|diff|/max|ref| per (sequence, head) and turns NaN into inf."""
    ref = torch.ones((3, 2, 4), dtype=torch.float64)
    out = ref.clone()
    out[1, 1, 0] = 1.5
    out[2, 0, 3] = float("nan")
    err = rel_error_per_seq_head(out, ref, torch.tensor([0, 0, 1]))
    assert err[0].tolist() == [0.0, 0.5]
    assert math.isinf(err[1, 0]) and err[1, 1] == 0


def test_case_tables_share_prefixes_and_poison_unused_rows():
    """Tables share a leading block, repeat a page, skip block 0; unused cache rows are NaN."""
    import random

    tables, num_blocks = make_block_tables(random.Random(1), [16, 40, 3], 8)
    assert tables[0][0] == tables[1][0]
    assert tables[1][1] == tables[1][2]
    assert all(0 < b < num_blocks for t in tables for b in t)
    case = make_case([10], 1, 16, 8, torch.float32, seed=5)
    last = case.block_tables[0][1]
    assert not case.k_cache[last, :2].isnan().any() and case.k_cache[last, 2:].isnan().all()
