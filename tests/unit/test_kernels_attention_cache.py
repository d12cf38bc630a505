"""CPU tests of paged_attention's bound-launch cache (kernels/decode_cache.py's FAST level).

Calls with tensor tables, offsets and lengths and both maxima given are looked up by every
property the checks and the plan read. A cached call must give what an uncached one gives; a
call with one property changed must be checked again: raise where the checks raise, or give
the reference result. Calls get fresh q / out views, as a forward pass makes them.
See tests/unit/test_kernels_decode_attention.py for why TRITON_INTERPRET is set only without CUDA.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels import attention, decode_cache
from kernels.attention import paged_attention
from kernels.decode_attention import clear_launch_cache, paged_decode_attention
from kernels.decode_config import DecodeConfig
from kernels.fp8 import quantize
from kernels.prefill_attention import paged_prefill_attention
from kernels.prefill_config import PrefillConfig
from kernels.reference import (
    Variant,
    ref_decode_attention,
    ref_prefill_attention,
    rel_error_per_seq_head,
)
from kernels.testing import TOLERANCE, make_case, poisoned, random_queries

SMALL = PrefillConfig(block_m=16, block_n=16, num_warps=4, num_stages=2)
# (context, new tokens): two short sequences (split-K items) then a prefill chunk.
MIXED = [(12, 1), (40, 2), (14, 5)]
EXTEND = [(40, 3), (19, 2)]  # all short: split-K items only


@dataclass
class Batch:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    tables: torch.Tensor
    starts: torch.Tensor
    lens: torch.Tensor
    block_tables: list[list[int]]
    kw: dict[str, object]
    seed: int

    def call(self, **changes):
        """paged_attention on fresh views of q and a NaN output (`changes` replace any of its
        arguments: q, k, v, tables, starts, lens, or keywords)."""
        args = {"q": self.q[:], "k": self.k, "v": self.v, "tables": self.tables,
                "starts": self.starts, "lens": self.lens}
        kw = {**self.kw, **{name: value for name, value in changes.items() if name not in args}}
        args.update({name: value for name, value in changes.items() if name in args})
        kw.setdefault("out", poisoned(args["q"]))
        return paged_attention(args["q"], args["k"], args["v"], args["tables"], args["starts"],
                               args["lens"], **kw)

    def token_seq(self, starts=None):
        s = (self.starts if starts is None else starts).tolist()
        return torch.repeat_interleave(torch.arange(len(s) - 1), torch.tensor(s).diff())


def _batch(seqs, dtype=torch.float32, fp8=False, fused=True, **kw):
    lens, starts = [c for c, _ in seqs], [0]
    for _, n in seqs:
        starts.append(starts[-1] + n)
    case = make_case(lens, 2, 16, 4, torch.bfloat16 if fp8 else dtype)
    k, v = case.k_cache, case.v_cache
    if fp8:
        k, v = quantize(k, 0.25), quantize(v, 2.0)
        kw.update(k_scale=0.25, v_scale=2.0)
    q = random_queries((starts[-1], 4, 16), dtype, "cpu", case.seed)
    width = max(len(t) for t in case.block_tables)
    tables = torch.tensor([t + [0] * (width - len(t)) for t in case.block_tables],
                          dtype=torch.int32)
    kw = {"max_query_len": max(n for _, n in seqs), "max_context_len": max(lens),
          "prefill_config": SMALL, "decode_config": DecodeConfig(
              block_n=16, min_tokens_per_split=16, fused_reduce=fused), **kw}
    clear_launch_cache()
    return Batch(q, k, v, tables, torch.tensor(starts, dtype=torch.int32),
                 torch.tensor(lens, dtype=torch.int32), case.block_tables, kw, case.seed)


def _ref(b, q=None, tables=None, starts=None, lens=None, **kw):
    return ref_prefill_attention(b.q if q is None else q, b.k, b.v,
                                 b.block_tables if tables is None else tables,
                                 b.starts if starts is None else starts,
                                 b.lens if lens is None else lens, **kw)


@pytest.fixture
def checks(monkeypatch):
    """Counts of paged_attention's check_inputs and cached_plan calls (the full path's)."""
    counts = {"checks": 0, "plans": 0}
    real_check, real_plan = attention.check_inputs, attention.cached_plan

    def check(*args):
        counts["checks"] += 1
        return real_check(*args)

    def plan(sh):
        counts["plans"] += 1
        return real_plan(sh)

    monkeypatch.setattr(attention, "check_inputs", check)
    monkeypatch.setattr(attention, "cached_plan", plan)
    return counts


@pytest.mark.parametrize("kind", ["extend", "extend unfused", "mixed", "mixed fp8"])
def test_cached_call_equals_uncached(kind, checks):
    """The bound launch (its merge launch included) gives the uncached call's very output."""
    seqs, extra = (MIXED, {"num_small_seqs": 2, "small_query_len": 2}) if "mixed" in kind \
        else (EXTEND, {})
    fp8 = "fp8" in kind
    b = _batch(seqs, torch.bfloat16 if fp8 else torch.float32, fp8=fp8,
               fused="unfused" not in kind, **extra)
    first = b.call()
    cached = b.call()
    assert checks == {"checks": 1, "plans": 1}
    clear_launch_cache()
    uncached = b.call()
    assert checks == {"checks": 2, "plans": 2}
    assert torch.equal(cached, uncached) and torch.equal(first, uncached)
    err = rel_error_per_seq_head(cached, _ref(b, variant=Variant(
        k_scale=b.kw.get("k_scale", 1.0), v_scale=b.kw.get("v_scale", 1.0))), b.token_seq())
    assert err.max() < TOLERANCE[b.q.dtype], f"seed {b.seed}: {err}"


def test_repeated_call_skips_checks_and_plan(checks):
    """Through paged_prefill_attention: the second call with fresh views and new lengths in
    the same power-of-two bucket runs no check and no plan lookup and reads the new lengths;
    lists, or a missing maximum, take the full path every call."""
    b = _batch(EXTEND)
    args = (b.k, b.v, b.tables, b.starts, b.lens)
    kw = {"max_new_tokens": 3, "max_context_len": 40, "config": SMALL,
          "decode_config": b.kw["decode_config"]}
    paged_prefill_attention(b.q[:], *args, **kw)
    b.lens[:] = torch.tensor([35, 17])
    out = paged_prefill_attention(b.q[:], *args, out=poisoned(b.q), **kw)
    assert checks["checks"] == 1 and checks["plans"] == 1
    err = rel_error_per_seq_head(out, _ref(b, lens=[35, 17]), b.token_seq())
    assert err.max() < 1e-5, f"seed {b.seed}: {err}"
    lists = (b.k, b.v, b.block_tables, b.starts.tolist(), b.lens.tolist())
    for _ in range(2):
        paged_prefill_attention(b.q[:], *lists, **kw)
    paged_prefill_attention(b.q[:], *args, max_new_tokens=3, config=SMALL,
                            decode_config=b.kw["decode_config"])
    assert checks["checks"] == 4


def _kernel_tables(tables, ratio):
    return [[blk * ratio + j for blk in row for j in range(ratio)] for row in tables]


@pytest.mark.parametrize("change", ["fewer sequences", "q dtype", "sinks", "window", "scale",
                                    "k_scale", "kernel_block_size"])
def test_changed_property_is_checked_again(change, checks):
    """After a cached call, one changed property misses the cache (the checks run) and the
    result matches the float64 reference."""
    fp8 = change == "q dtype"
    b = _batch(MIXED, torch.bfloat16 if fp8 else torch.float32, fp8=fp8, num_small_seqs=2,
               small_query_len=2)
    for _ in range(2):
        b.call()
    assert checks["checks"] == 1
    var = Variant(k_scale=b.kw.get("k_scale", 1.0), v_scale=b.kw.get("v_scale", 1.0))
    q, starts, tables, ref_kw = b.q, b.starts, b.block_tables, {}
    if change == "fewer sequences":
        starts = b.starts[:-1]
        q = b.q[:int(starts[-1])]
        out = b.call(q=q, tables=b.tables[:-1], starts=starts, lens=b.lens[:-1])
        tables, ref_kw = tables[:-1], {"lens": b.lens[:-1]}
    elif change == "q dtype":
        q = b.q.half()
        out = b.call(q=q)
    elif change == "sinks":
        sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])
        out = b.call(sinks=sinks)
        var = Variant(sinks=sinks)
    elif change == "window":
        out = b.call(sliding_window=7)
        var = Variant(window=7)
    elif change == "scale":
        out = b.call(scale=0.3)
        ref_kw = {"scale": 0.3}
    elif change == "k_scale":
        out = b.call(k_scale=0.5)
        var = Variant(k_scale=0.5)
    else:
        out = b.call(tables=torch.tensor(_kernel_tables(b.tables.tolist(), 2),
                                         dtype=torch.int32), kernel_block_size=2)
    assert checks["checks"] == 2
    ref = _ref(b, q=q, tables=tables, starts=starts, variant=var, **ref_kw)
    err = rel_error_per_seq_head(out, ref, b.token_seq(starts))
    assert err.max() < TOLERANCE[q.dtype], f"seed {b.seed}: {err}"


def _message(call):
    with pytest.raises(ValueError) as raised:
        call()
    return str(raised.value)


@pytest.mark.parametrize("bad", ["starts too long", "starts 2-D", "tables", "q dtype",
                                 "out dtype", "sinks", "lens dtype"])
def test_bad_input_after_a_hit_raises_as_uncached(bad):
    """Bad input after a cached hit raises the ValueError an uncached call raises."""
    b = _batch(MIXED, num_small_seqs=2, small_query_len=2)
    long = torch.cat([b.starts, b.starts[-1:]])
    calls = {"starts too long": lambda: b.call(starts=long),
             "starts 2-D": lambda: b.call(starts=b.starts.view(1, -1)),
             "tables": lambda: b.call(tables=b.tables[:-1]),
             "q dtype": lambda: b.call(q=b.q.half()),
             "out dtype": lambda: b.call(out=torch.empty_like(b.q, dtype=torch.float16)),
             "sinks": lambda: b.call(sinks=torch.zeros(3)),
             "lens dtype": lambda: b.call(lens=b.lens.float())}
    for _ in range(2):
        b.call()
    after_hit = _message(calls[bad])
    clear_launch_cache()
    assert after_hit == _message(calls[bad])


def test_in_place_change_of_the_offsets_is_checked_again():
    """The same offsets tensor resized in place after a hit raises."""
    b = _batch(MIXED, num_small_seqs=2, small_query_len=2)
    for _ in range(2):
        b.call()
    b.starts.resize_(3)
    with pytest.raises(ValueError, match="start offsets"):
        b.call()


def test_decode_and_attention_keep_separate_entries():
    """A decode and a one-token-per-sequence paged_attention call on the same tensors and
    options keep one entry each, and both match the reference."""
    b = _batch([(30, 1), (12, 1)], max_query_len=1)
    kw = {"max_context_len": 30, "config": b.kw["decode_config"]}
    for _ in range(2):
        dec = paged_decode_attention(b.q[:], b.k, b.v, b.tables, b.lens, **kw)
        att = b.call()
    assert len(decode_cache.FAST) == 2
    ref = ref_decode_attention(b.q, b.k, b.v, b.block_tables, b.lens)
    assert rel_error_per_seq_head(dec, ref).max() < 1e-5, f"seed {b.seed}"
    assert rel_error_per_seq_head(att, ref).max() < 1e-5, f"seed {b.seed}"
