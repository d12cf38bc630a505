"""Random paged-cache cases for the kernel tests and benchmarks, from a logged seed.

A case is what the allocator would hand the kernels: K/V caches, block tables and lengths.
Tables are made the way prefix sharing leaves them: sequences share their leading full blocks,
the rest are drawn from a random permutation of the free blocks (never block 0, the null
block), and a table may name one physical block twice. Every cache row no table reaches, and
every row past a sequence's context in its last block, is NaN, so any read outside the
context poisons the output.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import torch

SEED_ENV = "PAGEDSIM_KERNEL_SEED"

# Bounds on max|out - ref| / max|ref| per (sequence, head) against the float64 reference.
# fp32: IEEE products (input_precision="ieee") and fp32 sums; the online softmax adds a few
#   ulps per tile, observed ~3e-7, so 1e-5 leaves 30x margin yet catches any TF32 (~1e-3) use.
# fp16: the output is rounded to fp16 (2^-11 relative) and P enters the dot as fp16 (2^-11);
#   ~1e-3 worst case, checked at the 1e-2.
# bf16: rounding the output to bf16 costs up to 2^-8 = 3.9e-3 of an element. Decode sends P
#   through the dot as a hi+lo bf16 pair (2^-16, free in a memory-bound kernel); prefill rounds
#   P once (up to 2^-8 per weight, errors of random sign that mostly cancel): measured 4.0e-3 at
#   8 x 2048 over 2048 on the H200, where SDPA's flash kernel has 4.2e-3. Under the CPU
#   interpreter, whose fp32->bf16 cast truncates, kernels round to nearest first
#   (launch.round_to_bf16) so CPU tests see the GPU's numerics.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def fresh_seed() -> int:
    """A new random seed per call, or `$PAGEDSIM_KERNEL_SEED` to replay a failure; printed."""
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**31))
    print(f"kernel test seed: {seed} (replay with {SEED_ENV}={seed})")
    return seed


@dataclass(slots=True)
class PagedCase:
    """K/V caches `[num_blocks, block_size, num_kv_heads, head_size]` plus their block tables."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: list[list[int]]
    context_lens: list[int]
    seed: int


def make_block_tables(
    rng: random.Random,
    context_lens: list[int],
    block_size: int,
    *,
    shared_blocks: int = 1,
    repeat: bool = True,
) -> tuple[list[list[int]], int]:
    """Return (tables, num_blocks needed). Sequences long enough share `shared_blocks` full blocks.

    With `repeat`, a sequence with two or more full blocks of its own reads its first own block
    twice (the tables need not be valid allocations; the kernels must only follow them).
    """
    need = [-(-n // block_size) for n in context_lens]
    total = shared_blocks + sum(need)
    ids = list(range(1, total + 2))
    rng.shuffle(ids)
    shared, pool = ids[:shared_blocks], ids[shared_blocks:]
    tables = []
    for n, blocks in zip(context_lens, need):
        full = n // block_size
        prefix = shared[: min(shared_blocks, full)]
        own = [pool.pop() for _ in range(blocks - len(prefix))]
        if repeat and full - len(prefix) >= 2:
            own[1] = own[0]
        tables.append(prefix + own)
    return tables, total + 2


def make_case(
    context_lens: list[int],
    num_kv_heads: int,
    head_size: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    *,
    seed: int | None = None,
    shared_blocks: int = 1,
) -> PagedCase:
    """A random paged cache holding `context_lens` tokens per sequence, NaN everywhere else."""
    seed = fresh_seed() if seed is None else seed
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    tables, num_blocks = make_block_tables(
        rng, context_lens, block_size, shared_blocks=shared_blocks
    )
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    k = torch.full(shape, float("nan"), dtype=dtype)
    v = torch.full(shape, float("nan"), dtype=dtype)
    slots = torch.cat(
        [torch.empty(0, dtype=torch.int64)]
        + [
            torch.tensor(table, dtype=torch.int64)[torch.arange(n) // block_size] * block_size
            + torch.arange(n) % block_size
            for table, n in zip(tables, context_lens)
        ]
    ).unique()
    rows = (slots.numel(), num_kv_heads, head_size)
    k.view(-1, num_kv_heads, head_size)[slots] = torch.randn(rows, generator=gen).to(dtype)
    v.view(-1, num_kv_heads, head_size)[slots] = torch.randn(rows, generator=gen).to(dtype)
    return PagedCase(k.to(device), v.to(device), tables, list(context_lens), seed)


def random_queries(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, seed: int
) -> torch.Tensor:
    """Standard-normal queries of `shape` from `seed` (offset from the cache's draws)."""
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randn(shape, generator=gen).to(dtype=dtype, device=device)


def poisoned(like: torch.Tensor) -> torch.Tensor:
    """A NaN-filled buffer shaped like `like`: any element a kernel forgets to write stays NaN."""
    return torch.full_like(like, float("nan"))
