"""Launch configuration for paged decode attention: tile shape and the split-K heuristic.

Decode attention is a memory-bound stream over the KV cache. One program per (sequence, KV
head) reads one head's whole context, so small batches leave most multiprocessors idle: 1 x 4096
on Llama-3-8B is 8 programs for 132 SMs. Split-K (flash-decoding) cuts each context into
`num_splits` token ranges run by separate programs whose partial results are then merged:
by default inside the same launch (the last program of each (sequence, KV head) to finish
merges, see kernels/decode_attention.py), or by the separate kernel in decode_reduce.py
(`fused_reduce=False`). Fusing saves a second launch, whose host cost (~30+ us of Python and
Triton launch code on the H200 machine) exceeded the whole GPU time of small batches.

Heuristic (`choose_num_splits`): split only when the (sequence, KV head) programs alone number
fewer than `PROGRAMS_PER_SM` per multiprocessor, and then just enough to reach that count, but
never into ranges shorter than `MIN_TOKENS_PER_SPLIT`: below that, a program's fixed costs
(query load, partial-output write, merge) outweigh its streaming. On the H200 (132 SMs) this
splits 1/8/32/16 x 4096/4096/4096/16384 into 8/7/2/4 ranges and leaves batches of 64+ at
4096 whole; the split sweeps behind the constants are in benchmarks/RESULTS.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PROGRAMS_PER_SM = 3
MIN_TOKENS_PER_SPLIT = 512


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    """Tile shape and launch options of the decode kernel.

    `block_n` tokens per loop iteration (any power of two >= 16; independent of the page size);
    `num_warps` and `num_stages` are Triton's launch options (stages = software-pipeline depth);
    `fused_reduce` merges split-K partials in the same launch instead of a second kernel.
    """

    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 2
    fused_reduce: bool = True

    def __post_init__(self) -> None:
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            raise ValueError(f"block_n {self.block_n}: need a power of two >= 16")
        if self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise ValueError(f"num_warps {self.num_warps} / num_stages {self.num_stages} invalid")


_SPLIT_CONFIGS = (
    DecodeConfig(block_n=64, num_warps=4, num_stages=2),
    DecodeConfig(block_n=32, num_warps=4, num_stages=2),
)
_WHOLE_CONFIGS = (
    DecodeConfig(block_n=64, num_warps=2, num_stages=2),
    DecodeConfig(block_n=32, num_warps=4, num_stages=2),
)
_FP32_CONFIG = DecodeConfig(block_n=16, num_warps=4, num_stages=2)


def default_decode_config(head_size: int, dtype: torch.dtype, split: bool) -> DecodeConfig:
    """Tile shape per dtype and head size, and warps per program by grid shape.

    Measured on the H200 for Llama-3-8B shapes (benchmarks/RESULTS.md): 64-token tiles with 2
    pipeline stages (3 stages cost up to 30%); unsplit grids (large batches) ran fastest with
    2 warps per program (262 vs 326 us at 64 x 4096), split grids with 4 (265 vs 296 us at
    16 x 16384). Head size 256 halves the tile to keep 16 KiB per K stage. fp32 runs IEEE dots
    on the FMA units, which spill registers beyond 16-token tiles (sm_90 build, cuobjdump).
    """
    if dtype == torch.float32:
        return _FP32_CONFIG
    return (_SPLIT_CONFIGS if split else _WHOLE_CONFIGS)[0 if head_size <= 128 else 1]


def split_span(max_context_len: int, sliding_window: int | None) -> int:
    """Tokens a program range must cover: the whole context, or only the window."""
    span = max(1, max_context_len)
    if sliding_window:
        if sliding_window < 1:
            raise ValueError(f"sliding_window {sliding_window} must be >= 1")
        span = min(span, sliding_window)
    return span


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
    """Number of token ranges per (sequence, KV head); 1 means no split and no reduction.

    Args:
        num_seqs, num_kv_heads: the unsplit grid is their product.
        span: longest token range a sequence needs (see `split_span`).
        block_n: tile size; a split never holds less than one tile.
        num_sms: multiprocessors on the device.
        programs_per_sm, min_tokens_per_split: the heuristic's two knobs.
    """
    base = max(1, num_seqs * num_kv_heads)
    target = programs_per_sm * num_sms
    if base >= target:
        return 1
    wanted = -(-target // base)
    most = max(1, span // max(min_tokens_per_split, block_n))
    return max(1, min(wanted, most))
