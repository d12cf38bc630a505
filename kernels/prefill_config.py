"""Tile configuration of the query-tile (prefill) programs of the paged attention kernel."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class PrefillConfig:
    """Query rows and key tokens per tile, and Triton launch options.

    `split_p` sends bf16 probabilities through the P.V dot as a hi+lo pair (see
    `launch.split_p`). Off by default here: on the H200 benchmark (8 x 2048 new over 2048
    cached) it cost 35% (4.07 vs 3.01 ms) for an error of 3.4e-3 instead of 4.0e-3 against
    float64, where SDPA's flash kernel has 4.2e-3.
    """

    block_m: int = 128
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 3
    split_p: bool = False

    def __post_init__(self) -> None:
        for v in (self.block_m, self.block_n):
            if v < 16 or v & (v - 1):
                raise ValueError(f"tile size {v}: need a power of two >= 16")


def default_prefill_config(head_size: int, dtype: torch.dtype) -> PrefillConfig:
    """Tiles sized so that q, the accumulator and the K/V stages fit on one SM without spills.

    16-bit: 128 x 64 with 4 warps and 3 stages was the fastest of five configurations on the
    H200 benchmark of 2026-12-01 (2.44 ms for 8 x 2048 new over 2048 cached; 128 x 128 with 8
    warps: 2.72 ms; 128 x 32: 2.60 ms), and 4 warps also suit mixed launches with decodes.
    fp32 uses IEEE dots on the FMA units, which need far more registers: small tiles (no spills
    in the sm_90 build, checked with cuobjdump).
    """
    if dtype == torch.float32:
        if head_size <= 128:
            return PrefillConfig(block_m=32, block_n=16, num_warps=4, num_stages=2)
        return PrefillConfig(block_m=16, block_n=16, num_warps=4, num_stages=2)
    if head_size <= 128:
        return PrefillConfig(block_m=128, block_n=64, num_warps=4, num_stages=3)
    return PrefillConfig(block_m=64, block_n=32, num_warps=4, num_stages=3)
