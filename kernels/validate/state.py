"""What the validator knows while it replays a log: sequences, the paged cache and its shadow.

Each sequence keeps its logical token ids, their prefix hashes and the K/V rows those hashes
give (`kernels/validate/kv_content.py`), contiguous: the reference attention reads these, never the
paged cache. The paged cache is the tensor the kernels read and write. Beside it a numpy
*shadow* records which prefix hash each slot was last given (by a write, copy or swap); the
validator uses it only to pick mutation targets, to explain a mismatch and, where the log
lacks a prefix hit's token ids, to continue that sequence's hashes (counted as unverified).
With an fp8 cache a sequence keeps its rows quantised as `kernels.fp8.quantize` does (the
reference dequantises them with the scales); the cache gets the unquantised rows, which
reshape_and_cache quantises itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from kernels.fp8 import is_fp8, quantize
from kernels.reshape_and_cache import reshape_and_cache
from kernels.validate.kv_content import KVContent, extend_hashes, initial_hash


@dataclass(slots=True)
class SeqState:
    """One sequence's logical tokens, their hashes and K/V rows `[len, kv_heads, head_dim]`."""

    tokens: list[int]
    hashes: np.ndarray
    k: torch.Tensor
    v: torch.Tensor
    unverified: int = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def clone(self) -> SeqState:
        """An independent copy (a forked child continues from its parent's tokens)."""
        n = len(self.tokens)
        return SeqState(
            list(self.tokens),
            self.hashes.copy(),
            self.k[:n].clone(),
            self.v[:n].clone(),
            self.unverified,
        )

    def truncate(self, n: int) -> None:
        """Forget positions from `n` on (a re-admission recomputes them)."""
        del self.tokens[n:]
        self.hashes = self.hashes[:n]

    def append(
        self, tokens: list[int], hashes: np.ndarray, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Add rows after the current end, growing the row buffers by doubling."""
        n, m = len(self.tokens), len(tokens)
        if n + m > self.k.shape[0]:
            cap = max(n + m, 2 * self.k.shape[0], 16)
            for name in ("k", "v"):
                old = getattr(self, name)
                new = torch.empty((cap, *old.shape[1:]), dtype=old.dtype, device=old.device)
                new[:n] = old[:n]
                setattr(self, name, new)
        self.k[n : n + m] = k
        self.v[n : n + m] = v
        self.tokens.extend(tokens)
        self.hashes = np.concatenate([self.hashes, hashes])

    @property
    def last_hash(self) -> int | None:
        return int(self.hashes[-1]) if len(self.hashes) else None


@dataclass(slots=True)
class Replay:
    """The replay state of one allocator section (see the module docstring)."""

    content: KVContent
    block_size: int
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    k_cpu: torch.Tensor | None
    v_cpu: torch.Tensor | None
    seed: int
    k_scale: float = 1.0
    v_scale: float = 1.0
    shadow: np.ndarray = field(init=False)
    cpu_shadow: np.ndarray = field(init=False)
    seqs: dict[str, SeqState] = field(default_factory=dict)
    unverified_tokens: int = 0
    pending: list[tuple[np.ndarray, torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def __post_init__(self) -> None:
        bs = self.block_size
        self.shadow = np.zeros(self.k_cache.shape[0] * bs, dtype=np.uint64)
        cpu_blocks = 0 if self.k_cpu is None else self.k_cpu.shape[0]
        self.cpu_shadow = np.zeros(cpu_blocks * bs, dtype=np.uint64)

    @property
    def fp8(self) -> bool:
        return is_fp8(self.k_cache.dtype)

    def new_state(self) -> SeqState:
        c = self.content
        empty = torch.empty((0, c.num_kv_heads, c.head_dim), dtype=self.k_cache.dtype,
                            device=c.device)
        return SeqState([], np.empty(0, dtype=np.uint64), empty, empty.clone())

    def stored(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows as the cache holds them (quantised for fp8)."""
        if self.fp8:
            return quantize(k, self.k_scale), quantize(v, self.v_scale)
        return k, v

    def extend(
        self, state: SeqState, tokens: list[int]
    ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        """Append `tokens` to `state`; returns their hashes and K/V rows."""
        prev = state.last_hash
        hashes = extend_hashes(initial_hash(self.seed) if prev is None else prev, tokens)
        k, v = self.content.kv_rows(hashes)
        state.append(tokens, hashes, *self.stored(k, v))
        return hashes, k, v

    def adopt_hashes(self, state: SeqState, hashes: np.ndarray) -> None:
        """Append positions known only by their hashes (read from the shadow: unverified)."""
        k, v = self.content.kv_rows(hashes)
        state.append([-1] * len(hashes), hashes, *self.stored(k, v))
        state.unverified += len(hashes)
        self.unverified_tokens += len(hashes)

    def queue_write(self, slots: np.ndarray, hashes: np.ndarray, k: torch.Tensor,
                    v: torch.Tensor) -> None:
        """Queue K/V rows for `slots`; the shadow changes now, the cache at `flush`."""
        self.shadow[slots] = hashes
        self.pending.append((slots, k, v))

    def flush(self) -> None:
        """Write the queued rows with one reshape_and_cache call (the last write of a slot wins).

        Steps whose attention is not compared only queue their writes, so a run of such
        steps costs one kernel launch; copies, swaps and attention flush first.
        """
        if not self.pending:
            return
        slots = np.concatenate([p[0] for p in self.pending])
        k = torch.cat([p[1] for p in self.pending])
        v = torch.cat([p[2] for p in self.pending])
        self.pending.clear()
        last = len(slots) - 1 - np.unique(slots[::-1], return_index=True)[1]
        keep = torch.as_tensor(np.sort(last), device=k.device)
        reshape_and_cache(k[keep], v[keep], self.k_cache, self.v_cache,
                          torch.as_tensor(slots[np.sort(last)], device=k.device),
                          k_scale=self.k_scale, v_scale=self.v_scale)

    def slots_of(self, table: list[int], start: int, end: int) -> np.ndarray:
        """Slot ids of positions [start, end) through `table` (computed here, not logged)."""
        pos = np.arange(start, end, dtype=np.int64)
        blocks = np.asarray(table, dtype=np.int64)[pos // self.block_size]
        return blocks * self.block_size + pos % self.block_size

    def shadow_copy(self, pairs: list[tuple[int, int]], src_cpu: bool, dst_cpu: bool) -> None:
        """Mirror a block copy or swap in the slot shadow."""
        a = self.cpu_shadow if src_cpu else self.shadow
        b = self.cpu_shadow if dst_cpu else self.shadow
        bs = self.block_size
        rows = [a[s * bs : (s + 1) * bs].copy() for s, _ in pairs]
        for (_, d), row in zip(pairs, rows):
            b[d * bs : (d + 1) * bs] = row
