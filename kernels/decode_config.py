"""Launch configuration of the split-K work items: tile shape and the split rule's knobs.

Decode attention is a memory-bound stream over the KV cache. One program per (sequence, KV
head) reads one head's whole context, so small batches leave most multiprocessors idle (1 x
4096 on Llama-3-8B is 8 programs for 132 SMs) and ragged ones end in a tail of a few long
programs. The kernel therefore cuts the work into items by tokens (kernels/split_k.py): about
`programs_per_sm x SMs` items of equal length for a uniform batch, `ragged_programs_per_sm x
SMs` shorter ones for a ragged batch, none shorter than `min_tokens_per_split` (below that an
item's fixed costs, query load, partial write and merge, outweigh its streaming). On the H200
(132 SMs) a uniform batch gets 16 / 6 / 2 / 4 items per sequence at 1 / 8 / 32 x 4096 and
16 x 16384, and batches of 64+ at 4096 stay whole; benchmarks/RESULTS.md has the sweeps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from kernels.split_k import split_rule

PROGRAMS_PER_SM = 3
RAGGED_PROGRAMS_PER_SM = 24
MIN_TOKENS_PER_SPLIT = 256
MAX_SPLITS = 64
# How fp8 K/V tiles become fp16 (the kernel's FP8 constant; kernels/attention_core.py `_tile`):
# Triton's cast for both, the packed PTX conversion (`fp8.widen_e4m3`) for V only, or for both.
FP8_WIDEN = {"cast": 1, "asm_v": 2, "asm": 3}
PIPELINES = {"triton": 0, "table_asm": 1, "prefetch": 2}


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    """Tile shape and launch options of the decode kernel.

    `block_n` tokens per loop iteration (any power of two >= 16; independent of the page size);
    `num_warps` and `num_stages` are Triton's launch options (stages = software-pipeline depth);
    `fused_reduce` merges split-K partials in the same launch (the last program of a sequence
    to finish merges) instead of a second, row-parallel kernel;
    `programs_per_sm`, `ragged_programs_per_sm` and `min_tokens_per_split` are the split
    rule's knobs (module docstring); `split_p` sends probabilities through the P.V dot as a
    hi+lo pair (`launch.split_p`; default: bf16 with one query token per sequence);
    `fp8_widen` how fp8 tiles are widened to fp16 (FP8_WIDEN; the interpreter always casts);
    `pipeline` how the K/V loads overlap the arithmetic (PIPELINES; attention_core.py):
    "triton" Triton's own pipelining, "table_asm" the same with the block table read through
    PTX (num_stages - 1 tiles in flight; its table index is clamped to the row's valid
    entries), "prefetch" by hand (num_stages = 1 leaves it alone); `maxnreg` caps the
    registers per thread (Triton's launch option; None: the compiler's choice; decode-only
    launches), for more resident programs.
    """

    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 2
    fused_reduce: bool = True
    programs_per_sm: int = PROGRAMS_PER_SM
    ragged_programs_per_sm: int = RAGGED_PROGRAMS_PER_SM
    min_tokens_per_split: int = MIN_TOKENS_PER_SPLIT
    split_p: bool | None = None
    fp8_widen: str = "asm_v"
    pipeline: str = "triton"
    maxnreg: int | None = None

    def __post_init__(self) -> None:
        if self.fp8_widen not in FP8_WIDEN:
            raise ValueError(f"fp8_widen {self.fp8_widen!r}: expected one of {sorted(FP8_WIDEN)}")
        if self.pipeline not in PIPELINES:
            raise ValueError(f"pipeline {self.pipeline!r}: expected one of {sorted(PIPELINES)}")
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            raise ValueError(f"block_n {self.block_n}: need a power of two >= 16")
        if self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise ValueError(f"num_warps {self.num_warps} / num_stages {self.num_stages} invalid")
        if min(self.programs_per_sm, self.ragged_programs_per_sm, self.min_tokens_per_split) < 1:
            raise ValueError("programs_per_sm, ragged_programs_per_sm, min_tokens_per_split >= 1")


_SPLIT_CONFIGS = (
    DecodeConfig(block_n=64, num_warps=2, num_stages=2),
    DecodeConfig(block_n=32, num_warps=4, num_stages=2),
)
_WHOLE_CONFIGS = (
    DecodeConfig(block_n=64, num_warps=2, num_stages=2),
    DecodeConfig(block_n=32, num_warps=4, num_stages=2),
)
_FP32_CONFIG = DecodeConfig(block_n=16, num_warps=4, num_stages=2)
# Extends: the table read through PTX with 3 stages (2026-12-02 A/B on the H200, 16 x (16 new
# over 16,384) under CUDA graphs: 282 us, 1.08x the decode of the same KV; 2 stages 309 us).
_EXTEND_CONFIG = DecodeConfig(block_n=64, num_warps=4, num_stages=3, fused_reduce=False,
                              pipeline="table_asm")
# fp8: V widened by the packed PTX conversion, K by Triton's cast, the table read through PTX
# with 3 stages (2026-12-02 A/B on the H200, 64 x 4096: 159 us; 2 stages 180; bf16 263). The
# PTX table load's index is clamped (attention_core.py `_kv_rows`): an earlier, unclamped
# version read past a table's end once.
_FP8_CONFIG = DecodeConfig(block_n=64, num_warps=2, num_stages=3, fp8_widen="asm_v",
                           pipeline="table_asm")


def default_decode_config(head_size: int, dtype: torch.dtype, split: bool, *,
                          query_tokens: int = 1, fp8: bool = False,
                          mixed: bool = False) -> DecodeConfig:
    """Tile shape per dtype and head size, query tokens and cache dtype.

    Measured on the H200 for Llama-3-8B shapes (benchmarks/RESULTS.md, 2026-12-01 sweeps):
    64-token tiles with 2 warps and 2 stages were the fastest or within 1% for uniform and
    ragged bf16 batches, split or not (32 x 4096: 142 us; 128-token tiles / 4 warps 148;
    64 / 4 warps 184); fp8 caches 3 stages with the table read through PTX (64 x 4096: 159
    us; 2 stages 180). Items of several query tokens (extends, 64+ rows) take 4 warps, the
    separate row-parallel merge and the PTX table with 3 stages (16 x 16 over 16384: 282 us
    under graphs; 2 stages 309; fused merge slower). In a mixed launch (`mixed`: query tiles
    too, whose 4 warps and 3 stages the launch takes) the items read the table through PTX as
    well (64 x 4096 decodes + a 2,048-token chunk: 0.98x the two calls; Triton's pipelining
    1.07x). Head size 256 halves the tile; fp32
    runs IEEE dots on the FMA units, which spill registers beyond 16-token tiles.
    """
    if dtype == torch.float32:
        return _FP32_CONFIG
    big = 0 if head_size <= 128 else 1
    cfg = _EXTEND_CONFIG if query_tokens > 1 else (_SPLIT_CONFIGS if split else _WHOLE_CONFIGS)[big]
    if query_tokens > 1 and big:
        cfg = _SPLIT_CONFIGS[1]
    if fp8 and query_tokens == 1 and not big:
        cfg = _FP8_CONFIG
    if mixed and cfg.pipeline == "triton" and dtype != torch.float32:
        cfg = replace(cfg, pipeline="table_asm")
    return cfg


def split_span(max_context_len: int, sliding_window: int | None) -> int:
    """Tokens a program range must cover: the whole context, or only the window."""
    span = max(1, max_context_len)
    if sliding_window:
        if sliding_window < 1:
            raise ValueError(f"sliding_window {sliding_window} must be >= 1")
        span = min(span, sliding_window)
    return span


def min_chunk(cfg: DecodeConfig, max_span: int) -> int:
    """Shortest item: `min_tokens_per_split`, at least a tile, at most MAX_SPLITS per sequence."""
    least = max(cfg.min_tokens_per_split, cfg.block_n, -(-max_span // MAX_SPLITS))
    return -(-least // cfg.block_n) * cfg.block_n


def choose_num_splits(
    num_seqs: int,
    num_kv_heads: int,
    span: int,
    block_n: int,
    num_sms: int,
    *,
    programs_per_sm: int = PROGRAMS_PER_SM,
    min_tokens_per_split: int = MIN_TOKENS_PER_SPLIT,
) -> int:
    """Items per sequence of a uniform batch (`num_seqs` sequences of `span` keys), as the
    kernel's work list (kernels/split_k.py) cuts it; 1 means no split and no merge."""
    cfg = DecodeConfig(block_n=block_n, programs_per_sm=programs_per_sm,
                       min_tokens_per_split=min_tokens_per_split)
    return split_rule(num_seqs, num_kv_heads, span, block_n, programs_per_sm * num_sms,
                      min_chunk(cfg, span))
