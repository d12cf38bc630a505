"""The scheduler's knobs, as one frozen value built by ``sim/cli.py`` (or by tests directly).

Defaults are vLLM's (and the design's seed scenario): 16-token blocks, 4096-token
max_model_len, 256 sequences and 8192 tokens per step, chunked prefill and prefix caching on,
preemption by recompute. ``fast`` turns on the provably state-preserving shortcuts of
``sim/cohort.py``; turning it off gives the reference loop the shortcut test compares with.
"""
from __future__ import annotations

from dataclasses import dataclass

PREEMPTION_MODES = ("recompute", "swap")
SAMPLING_MODES = ("cow", "fanout")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """How the engine batches, admits and preempts.

    Attributes:
        num_gpu_blocks: pool size N in blocks (block 0 is the null block).
        block_size: tokens per block.
        max_model_len: longest sequence (prompt + output).
        max_num_seqs: most sequences running at once.
        max_num_batched_tokens: token budget of one step.
        chunked_prefill: split long prefills over steps (vLLM v1 default on).
        prefix_caching: prefix caching for paged managers.
        preemption: "recompute" (vLLM v1) or "swap" (vLLM v0, needs num_cpu_blocks > 0).
        num_cpu_blocks: CPU swap pool in blocks.
        n: parallel samples per request; None keeps the trace's value.
        beam_width: beam width; None keeps the trace's value (1: no beam search).
        sampling_mode: "cow" (one prefill, fork after it) or "fanout" (n independent requests).
        beam_keep_prob: beam model: chance a new beam keeps its own parent (see sampling.py).
        seed: seeds token derivation and the beam model.
        fast: use the shortcuts of ``sim/cohort.py`` where they apply.
        debug: run ``check_invariants`` (and verify the fast snapshot) after every step.
        record_log: record the allocation log (forces the reference loop).
    """

    num_gpu_blocks: int
    block_size: int = 16
    max_model_len: int = 4096
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    prefix_caching: bool = True
    preemption: str = "recompute"
    num_cpu_blocks: int = 0
    n: int | None = None
    beam_width: int | None = None
    sampling_mode: str = "cow"
    beam_keep_prob: float = 0.75
    seed: int = 0
    fast: bool = True
    debug: bool = False
    record_log: bool = False

    def __post_init__(self) -> None:
        positive = ("num_gpu_blocks", "block_size", "max_model_len", "max_num_seqs",
                    "max_num_batched_tokens")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be >= 2 (block 0 is the null block), "
                             f"got {self.num_gpu_blocks}")
        if self.preemption not in PREEMPTION_MODES:
            raise ValueError(f"preemption must be recompute or swap, got {self.preemption!r}")
        if self.sampling_mode not in SAMPLING_MODES:
            raise ValueError(f"sampling_mode must be cow or fanout, got {self.sampling_mode!r}")
        if self.num_cpu_blocks < 0:
            raise ValueError(f"num_cpu_blocks must be >= 0, got {self.num_cpu_blocks}")
        for name in ("n", "beam_width"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not 0.0 <= self.beam_keep_prob <= 1.0:
            raise ValueError(f"beam_keep_prob must be in [0, 1], got {self.beam_keep_prob}")
        if not self.chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                "without chunked prefill, max_num_batched_tokens "
                f"({self.max_num_batched_tokens}) must be >= max_model_len ({self.max_model_len})"
            )

    @property
    def capacity_slots(self) -> int:
        """Usable KV slots, (N - 1) x block_size."""
        return (self.num_gpu_blocks - 1) * self.block_size
