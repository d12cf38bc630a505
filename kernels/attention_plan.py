"""Launch plans of the paged attention kernel, computed once per shape and cached.

A plan holds what depends only on shapes and options: the grid, the kernel's constants, the
split rule's knobs and the split-K scratch size. The work list itself is built on the device
per call (kernels/split_k.py), so plans never read context lengths. Context lengths enter
the key rounded up to a power of two, so a serving loop whose lengths grow by one token per
step keeps hitting the same few plans (and compiled kernels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton

from kernels.attention_core import LOG2E, num_rows
from kernels.attention_kernel import paged_attention_kernel
from kernels.decode_config import (
    FP8_WIDEN,
    PIPELINES,
    DecodeConfig,
    choose_num_splits,
    default_decode_config,
    min_chunk,
)
from kernels.fp8 import is_fp8
from kernels.launch import dot_precision, split_p
from kernels.prefill_config import PrefillConfig, default_prefill_config
from kernels.split_k import merge_block

MAX_PLANS = 512


@dataclass(frozen=True, slots=True)
class Shape:
    """Everything a plan depends on (the cache key)."""

    num_small: int
    small_len: int
    num_large: int
    large_len: int
    max_span: int
    num_q_heads: int
    num_kv_heads: int
    head_size: int
    block_size: int
    dtype: torch.dtype
    kv_dtype: torch.dtype
    window: int | None
    chunk: int | None
    soft_cap: float | None
    has_sink: bool
    scale: float
    k_scale: float
    v_scale: float
    forced: int
    decode_config: DecodeConfig | None
    prefill_config: PrefillConfig | None
    num_sms: int
    interpret: bool
    q_starts: bool
    v_transposed: bool = False  # V stored per block as [kv_heads, head_size, block_size]


@dataclass(frozen=True, slots=True)
class Plan:
    """One launch (and the merge launch, if `merge_grid`): grid, constants, scalars, scratch."""

    grid: int
    scalars: tuple[Any, ...]
    constexprs: dict[str, Any]
    const_args: tuple[Any, ...]
    launch: dict[str, int]
    merge_grid: int
    merge_constexprs: dict[str, Any]
    scratch_rows: int
    counters: int
    head_size: int
    num_small: int


def bucket(n: int) -> int:
    """`n` rounded up to a power of two (at least 16), for plan keys."""
    return max(16, int(triton.next_power_of_2(max(1, n))))


def _seq_tile(num_seqs: int, interpret: bool) -> int:
    """Sequences the work list reads per step: one of two sizes on the GPU (fewer compiled
    variants), the batch's own under the interpreter (whose cost grows with the tile)."""
    if interpret:
        return min(1024, int(triton.next_power_of_2(num_seqs)))
    return 256 if num_seqs <= 256 else 1024


def _small_part(sh: Shape) -> tuple[dict[str, Any], tuple[int, ...], int]:
    """Constants, split-rule scalars and item count of the split-K programs."""
    qt = int(triton.next_power_of_2(max(1, sh.small_len)))
    rows, block_m = num_rows(qt, sh.num_q_heads // sh.num_kv_heads)
    split = choose_num_splits(sh.num_small, sh.num_kv_heads, sh.max_span, 64, sh.num_sms) > 1
    fp8 = is_fp8(sh.kv_dtype)
    cfg = sh.decode_config or default_decode_config(sh.head_size, sh.dtype, split or sh.forced > 1,
                                                    query_tokens=qt, fp8=fp8,
                                                    mixed=sh.num_large > 0)
    least = min_chunk(cfg, sh.max_span)
    target = cfg.programs_per_sm * sh.num_sms
    target_ragged = cfg.ragged_programs_per_sm * sh.num_sms
    if sh.forced:
        items = sh.num_small * min(sh.forced, -(-sh.max_span // cfg.block_n))
    else:
        most = -(-max(target, target_ragged) // sh.num_kv_heads)
        items = min(sh.num_small * max(1, sh.max_span // least), sh.num_small + most)
    rp = int(triton.next_power_of_2(rows))
    use_split_p = cfg.split_p if cfg.split_p is not None else (
        split_p(sh.dtype) and qt == 1 and not fp8)
    consts = {"QT": qt, "ROWS": rows, "RP": rp, "BLOCK_M": block_m, "BLOCK_N": cfg.block_n,
              "SEQ_TILE": _seq_tile(sh.num_small, sh.interpret),
              "BLOCK_S": merge_block(rp, sh.head_size, 512 * cfg.num_warps),
              "FUSED": cfg.fused_reduce, "SPLIT_P": use_split_p, "num_warps": cfg.num_warps,
              "num_stages": cfg.num_stages,
              "FP8": 0 if not fp8 else 1 if sh.interpret else FP8_WIDEN[cfg.fp8_widen],
              "PIPE": 0 if sh.interpret and cfg.pipeline == "table_asm"
              else PIPELINES[cfg.pipeline], "MAXNREG": cfg.maxnreg}
    return consts, (target, target_ragged, least, sh.forced), items


def _large_part(sh: Shape) -> tuple[dict[str, Any], int, int]:
    """Constants, query tiles per sequence and program count of the query-tile programs."""
    cfg = sh.prefill_config or default_prefill_config(sh.head_size, sh.dtype)
    m_blocks = -(-max(1, sh.large_len) // cfg.block_m)
    consts = {"LARGE_M": cfg.block_m, "LARGE_N": cfg.block_n, "LARGE_SPLIT_P": cfg.split_p,
              "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    return consts, m_blocks, m_blocks * sh.num_large * sh.num_q_heads


_NO_SMALL = ({"QT": 1, "ROWS": 1, "RP": 1, "BLOCK_M": 16, "BLOCK_N": 16, "SEQ_TILE": 1,
              "BLOCK_S": 1, "FUSED": True, "SPLIT_P": False, "FP8": 1,
              "PIPE": 0}, (1, 1, 1, 0), 0)
_NO_LARGE = ({"LARGE_M": 16, "LARGE_N": 16, "LARGE_SPLIT_P": False}, 1, 0)
_MERGE_KEYS = ("NUM_KV_HEADS", "QPK", "ROWS", "HEAD_SIZE", "BLOCK_N", "SEQ_TILE", "Q_STARTS",
               "USE_WINDOW", "USE_CHUNK", "HAS_SINK")
MERGE_ROWS = 4  # rows per program of the separate merge launch


def make_plan(sh: Shape) -> Plan:
    """The plan of one shape (see `cached_plan`)."""
    small, small_scalars, items = _small_part(sh) if sh.num_small else _NO_SMALL
    large, m_blocks, large_programs = _large_part(sh) if sh.num_large else _NO_LARGE
    consts = {**small, **large}  # a mixed launch takes the query tiles' warps and stages
    fp8 = is_fp8(sh.kv_dtype)
    consts["FP8"] = consts["FP8"] if fp8 else 0
    # A transposed V: block slices (2) where every range starts on a tile, which only a window
    # or a local chunk prevents, else element by element (1); widened by Triton's cast once
    # its slices are laid out as the dot takes them; the hand pipeline reads token-major V only.
    consts["V_T"] = 0 if not sh.v_transposed else 1 if sh.window or sh.chunk else 2
    if sh.v_transposed:
        consts["FP8"] = min(consts["FP8"], 1)
        if consts["PIPE"] == 2:
            consts["PIPE"] = 0 if sh.interpret else 1
    bf16_cpu = sh.interpret and sh.dtype == torch.bfloat16
    consts.update(NUM_KV_HEADS=sh.num_kv_heads, QPK=sh.num_q_heads // sh.num_kv_heads,
                  HEAD_SIZE=sh.head_size, BLOCK_SIZE=sh.block_size, HAS_SMALL=sh.num_small > 0,
                  HAS_LARGE=sh.num_large > 0, Q_STARTS=sh.q_starts, USE_WINDOW=bool(sh.window),
                  USE_CHUNK=bool(sh.chunk), SOFT_CAP=sh.soft_cap is not None,
                  HAS_SINK=sh.has_sink, UPCAST=bf16_cpu and not fp8,
                  ROUND_OUT=bf16_cpu, DOT_PRECISION=dot_precision(torch.float16 if fp8
                                                                  else sh.dtype))
    scale, cap = sh.scale * sh.k_scale, sh.soft_cap or 1.0
    scalars = (sh.num_small, *small_scalars, sh.num_large, m_blocks, large_programs,
               sh.window or 0, sh.chunk or 0, scale * LOG2E, 2 * LOG2E * scale / cap,
               cap * LOG2E, sh.v_scale)
    rt = min(consts["RP"], MERGE_ROWS)
    merge = {k: consts[k] for k in _MERGE_KEYS}
    merge.update(RT=rt, BLOCK_S=merge_block(rt, sh.head_size, 2048), ROUND_BF16=bf16_cpu,
                 num_warps=4)
    unfused = sh.num_small > 0 and not consts["FUSED"]
    merge_grid = sh.num_small * sh.num_kv_heads * -(-consts["ROWS"] // rt) if unfused else 0
    launch = {"num_warps": consts["num_warps"], "num_stages": consts["num_stages"]}
    if consts.pop("MAXNREG", None) and not sh.num_large and not sh.interpret:
        launch["maxnreg"] = small["MAXNREG"]
    names = paged_attention_kernel.arg_names
    const_args = tuple(consts[name] for name in names[names.index("NUM_KV_HEADS"):])
    return Plan(large_programs + items * sh.num_kv_heads, scalars, consts, const_args, launch,
                merge_grid, merge,
                items * sh.num_kv_heads * consts["ROWS"], sh.num_small * sh.num_kv_heads,
                sh.head_size, sh.num_small)


_PLANS: dict[Shape, Plan] = {}


def cached_plan(sh: Shape) -> Plan:
    """`make_plan(sh)`, memoised (the cache is emptied when it reaches MAX_PLANS)."""
    plan = _PLANS.get(sh)
    if plan is None:
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[sh] = make_plan(sh)
    return plan
