"""CPU tests of the decode wrapper's launch caches (kernels/decode_cache.py).

A cached call followed by one with a single property changed must be checked again: raise
where the checks raise, or give the reference result. Each changed call gets fresh q views
(as a forward pass does), so it goes through the property-keyed level, not the identity one.
See tests/unit/test_kernels_decode_attention.py for why TRITON_INTERPRET is set only without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels import decode_cache
from kernels.decode_attention import clear_launch_cache, paged_decode_attention
from kernels.decode_config import DecodeConfig
from kernels.reference import ref_decode_attention, rel_error_per_seq_head
from kernels.testing import make_case, random_queries

LENS = [30, 12]


def _bound_case():
    case = make_case(LENS, 2, 64, 8, torch.float32)
    q = random_queries((2, 4, 64), torch.float32, "cpu", case.seed)
    width = max(len(t) for t in case.block_tables)
    tables = torch.tensor([t + [0] * (width - len(t)) for t in case.block_tables],
                          dtype=torch.int32)
    clear_launch_cache()
    return case, q, tables, torch.tensor(LENS, dtype=torch.int32)


def _ref(q, case, lens=LENS, **kw):
    return ref_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, lens, **kw)


def _assert_close(out, ref, case):
    assert rel_error_per_seq_head(out, ref).max() < 1e-5, f"seed {case.seed}"


def test_repeated_calls_take_the_bound_launch():
    """Same shapes again: the cached launch reads the new lengths; a changed dtype is checked."""
    case, q, tables, lens = _bound_case()
    out = torch.empty_like(q)
    args = (q, case.k_cache, case.v_cache, tables, lens)
    paged_decode_attention(*args, max_context_len=30, out=out)
    size = len(decode_cache.FAST)
    lens[:] = torch.tensor([17, 3])
    paged_decode_attention(*args, max_context_len=30, out=out)
    assert len(decode_cache.FAST) == size
    _assert_close(out, _ref(q, case, [17, 3]), case)
    with pytest.raises(ValueError, match="dtype"):
        paged_decode_attention(q.half(), case.k_cache, case.v_cache, tables, lens,
                               max_context_len=30)


def test_layers_share_the_bound_launch():
    """Another layer's caches (other tensors, same properties) hit FAST and read their data."""
    case, q, tables, lens = _bound_case()
    paged_decode_attention(q[:], case.k_cache, case.v_cache, tables, lens, max_context_len=30)
    size = len(decode_cache.FAST)
    k, v = case.k_cache * 0.5 + 0.1, -case.v_cache
    out = paged_decode_attention(q[:], k, v, tables, lens, max_context_len=30)
    assert len(decode_cache.FAST) == size
    ref = ref_decode_attention(q, k, v, case.block_tables, LENS)
    assert rel_error_per_seq_head(out, ref).max() < 1e-5, f"seed {case.seed}"


@pytest.mark.parametrize("fused", [True, False])
def test_bound_split_k_launch_merges(fused):
    """A bound split-K launch (merged in-kernel or by the second launch) on fresh views and
    new lengths matches the reference, and so do SAME's calls."""
    case, q, tables, lens = _bound_case()
    cfg = DecodeConfig(block_n=16, fused_reduce=fused)
    kw = {"max_context_len": 30, "num_splits": 2, "config": cfg}
    paged_decode_attention(q[:], case.k_cache, case.v_cache, tables, lens, **kw)
    lens[:] = torch.tensor([25, 9])
    size = len(decode_cache.FAST)
    for view in (q[:], q, q, q):
        out = paged_decode_attention(view, case.k_cache, case.v_cache, tables, lens, **kw)
        _assert_close(out, _ref(q, case, [25, 9]), case)
    assert len(decode_cache.FAST) == size and id(q) in decode_cache.SAME


def test_changed_q_stride_is_checked_again():
    """A q with another token stride launches with it; heads not contiguous raise."""
    case, q, tables, lens = _bound_case()
    rest = (case.k_cache, case.v_cache, tables, lens)
    for _ in range(2):  # a miss, then a hit (the last hit is compared before the dict)
        paged_decode_attention(q[:], *rest, max_context_len=30)
    wide = torch.full((2, 7, 64), float("nan"))
    wide[:, :4] = q
    _assert_close(paged_decode_attention(wide[:, :4], *rest, max_context_len=30),
                  _ref(q, case), case)
    with pytest.raises(ValueError, match="contiguous"):
        paged_decode_attention(q.transpose(0, 1).contiguous().transpose(0, 1), *rest,
                               max_context_len=30)


def test_changed_out_dtype_is_checked_again():
    case, q, tables, lens = _bound_case()
    rest = (case.k_cache, case.v_cache, tables, lens)
    for _ in range(2):
        paged_decode_attention(q[:], *rest, max_context_len=30, out=torch.empty_like(q))
    with pytest.raises(ValueError, match="out: expected"):
        paged_decode_attention(q[:], *rest, max_context_len=30,
                               out=torch.empty_like(q, dtype=torch.float16))


def test_wider_tables_are_checked_again():
    """Tables padded wider (another row stride) give the reference result."""
    case, q, tables, lens = _bound_case()
    paged_decode_attention(q[:], case.k_cache, case.v_cache, tables, lens, max_context_len=30)
    wider = torch.zeros((2, tables.shape[1] + 3), dtype=torch.int32)
    wider[:, :tables.shape[1]] = tables
    out = paged_decode_attention(q[:], case.k_cache, case.v_cache, wider, lens,
                                 max_context_len=30)
    _assert_close(out, _ref(q, case), case)


def test_changed_lens_dtype_or_device_is_checked_again():
    case, q, tables, lens = _bound_case()
    rest = (case.k_cache, case.v_cache, tables)
    paged_decode_attention(q[:], *rest, lens, max_context_len=30)
    with pytest.raises(ValueError, match="context_lens: expected a 1-D"):
        paged_decode_attention(q[:], *rest, lens.float(), max_context_len=30)
    with pytest.raises(ValueError, match="context_lens: on meta"):
        paged_decode_attention(q[:], *rest, lens.to("meta"), max_context_len=30)
    _assert_close(paged_decode_attention(q[:], *rest, lens.long(), max_context_len=30),
                  _ref(q, case), case)


def test_changed_cache_stride_is_checked_again():
    """Caches with another token stride (views into wider buffers) launch with it."""
    case, q, tables, lens = _bound_case()
    paged_decode_attention(q[:], case.k_cache, case.v_cache, tables, lens, max_context_len=30)
    nb, bs, kv, d = case.k_cache.shape
    k = torch.full((nb, bs, kv + 1, d), float("nan"))[:, :, :kv]
    v = torch.full((nb, bs, kv + 1, d), float("nan"))[:, :, :kv]
    k.copy_(case.k_cache)
    v.copy_(case.v_cache)
    out = paged_decode_attention(q[:], k, v, tables, lens, max_context_len=30)
    _assert_close(out, _ref(q, case), case)
    with pytest.raises(ValueError, match="caches"):
        paged_decode_attention(q[:], k, case.v_cache, tables, lens, max_context_len=30)


def test_changed_scale_is_checked_again():
    case, q, tables, lens = _bound_case()
    rest = (case.k_cache, case.v_cache, tables, lens)
    for _ in range(2):
        paged_decode_attention(q[:], *rest, max_context_len=30)
    out = paged_decode_attention(q[:], *rest, max_context_len=30, scale=0.3)
    _assert_close(out, _ref(q, case, scale=0.3), case)


def test_in_place_resize_is_checked_again():
    """Tables and lengths resized, a cache transposed in place after a FAST call (the same
    tensors, new versions)."""
    case, q, tables, lens = _bound_case()
    args = (case.k_cache, case.v_cache, tables, lens)
    paged_decode_attention(q[:], *args, max_context_len=30)
    lens.resize_(3)
    with pytest.raises(ValueError, match="3 lengths"):
        paged_decode_attention(q[:], *args, max_context_len=30)
    lens.resize_(2)
    tables.resize_(1, tables.shape[1])
    with pytest.raises(ValueError, match="1 tables"):
        paged_decode_attention(q[:], *args, max_context_len=30)
    case, q, tables, lens = _bound_case()
    k = case.k_cache.clone()
    paged_decode_attention(q[:], k, case.v_cache, tables, lens, max_context_len=30)
    k.transpose_(1, 2)
    with pytest.raises(ValueError, match="caches"):
        paged_decode_attention(q[:], k, case.v_cache, tables, lens, max_context_len=30)


def test_same_tensors_take_the_identity_cache():
    """The same tensors twice in a row enter SAME; fresh views of q do not stay in it."""
    case, q, tables, lens = _bound_case()
    out = torch.empty_like(q)
    for _ in range(3):
        paged_decode_attention(q, case.k_cache, case.v_cache, tables, lens, max_context_len=30,
                               out=out)
    assert id(q) in decode_cache.SAME
    _assert_close(out, _ref(q, case), case)
    clear_launch_cache()
    view = None
    for _ in range(4):  # each view dies before the next: CPython may give it the same id
        view = q[:]
        paged_decode_attention(view, case.k_cache, case.v_cache, tables, lens,
                               max_context_len=30, out=out)
        del view
    assert len(decode_cache.SAME) <= 1
    assert all(entry[2][0]() is not None for entry in decode_cache.SAME.values())


def test_identity_cache_entry_leaves_with_any_of_its_tensors():
    """A promoted q's entry is gone once q, or any other tensor of the call, dies; then
    promotion pauses (the next views may get the dead one's id)."""
    case, q, tables, lens = _bound_case()
    for victim in ("q", "tables"):
        clear_launch_cache()
        view, t = q[:], tables.clone()
        for _ in range(2):
            paged_decode_attention(view, case.k_cache, case.v_cache, t, lens,
                                   max_context_len=30)
        view_id = id(view)
        assert view_id in decode_cache.SAME
        if victim == "q":
            del view
        else:
            del t
        assert view_id not in decode_cache.SAME
        (state,) = [entry[1] for entry in decode_cache.FAST.values()]
        assert state[1] == decode_cache.COOLDOWN


def test_identity_cache_sees_in_place_changes():
    """In-place resizes and transposes after a SAME call are checked again, not launched with
    old strides."""
    case, q, tables, lens = _bound_case()
    args = (q, case.k_cache, case.v_cache, tables, lens)
    for _ in range(3):
        paged_decode_attention(*args, max_context_len=30)
    assert id(q) in decode_cache.SAME
    lens.resize_(3)
    with pytest.raises(ValueError, match="3 lengths"):
        paged_decode_attention(*args, max_context_len=30)
    lens.resize_(2)
    lens.copy_(torch.tensor(LENS))
    tables.resize_(1, tables.shape[1])
    with pytest.raises(ValueError, match="1 tables"):
        paged_decode_attention(*args, max_context_len=30)
    case, q, tables, lens = _bound_case()
    args = (q, case.k_cache, case.v_cache, tables, lens)
    for _ in range(3):
        paged_decode_attention(*args, max_context_len=30)
    assert id(q) in decode_cache.SAME
    q.transpose_(0, 1)
    with pytest.raises(ValueError, match="contiguous"):
        paged_decode_attention(*args, max_context_len=30)


def test_inference_mode_tensors_use_the_property_cache():
    """Inference tensors have no version counter: calls still work, through FAST only."""
    case, q, tables, lens = _bound_case()
    with torch.inference_mode():
        qi, ti, li = q.clone(), tables.clone(), lens.clone()
        for _ in range(3):
            out = paged_decode_attention(qi, case.k_cache, case.v_cache, ti, li,
                                         max_context_len=30)
    assert not decode_cache.SAME and decode_cache.FAST
    _assert_close(out, _ref(q, case), case)
