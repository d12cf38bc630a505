"""The one interface the simulator calls, and every KV-cache manager implements.

Paged allocation (vLLM's ``KVCacheManager`` plus fork, copy-on-write and swap) and the
contiguous-preallocation baselines of the PagedAttention paper answer the same calls, in
vLLM's calling convention, so one simulator run can put them side by side on the same
workload and timing model. A manager that cannot do something (a prefix hit in a contiguous
arena, a swap without a CPU pool) returns the neutral answer and never raises for it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from allocator.profiles import DEFAULT_PROFILE, VllmProfile

if TYPE_CHECKING:
    from allocator.request import Request

BlockId = int
CopyPlan = list[tuple[BlockId, BlockId]]


class NoFreeBlocksError(RuntimeError):
    """An action was asked for although its ``can_X()`` query said no (no space for it)."""


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    """Everything a manager needs to build itself; the simulator fills it from its options.

    Attributes:
        num_gpu_blocks: N, the pool size in blocks (block 0 is the null block, so N - 1 usable).
        block_size: slots per block (tokens per block).
        max_model_len: longest sequence (prompt + output) a request may reach.
        enable_caching: prefix caching on or off.
        hash_algo: "sha256" (vLLM default), "sha256_cbor" or "fast".
        sliding_window: window in tokens for a sliding-window model, else None.
        num_cpu_blocks: CPU swap pool size in blocks (0: no swap space).
        placement: contiguous managers: "buddy" or "first-fit".
        log_stats: keep prefix-cache statistics.
        vllm_profile: the vLLM release the paged manager follows (``profile_for("0.33")``;
            default 0.14 behaviour).
        watermark: paged manager: fraction of blocks kept free when admitting (0.24+ option).
        max_in_flight_tokens: paged sliding-window admission cap term (None: never binds).
    """

    num_gpu_blocks: int
    block_size: int = 16
    max_model_len: int = 4096
    enable_caching: bool = True
    hash_algo: str = "sha256"
    sliding_window: int | None = None
    num_cpu_blocks: int = 0
    placement: str = "buddy"
    log_stats: bool = True
    vllm_profile: VllmProfile = DEFAULT_PROFILE
    watermark: float = 0.0
    max_in_flight_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1, got {self.num_gpu_blocks}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {self.max_model_len}")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"sliding_window must be >= 1, got {self.sliding_window}")
        if self.num_cpu_blocks < 0:
            raise ValueError(f"num_cpu_blocks must be >= 0, got {self.num_cpu_blocks}")
        if self.placement not in ("buddy", "first-fit"):
            raise ValueError(f"placement must be 'buddy' or 'first-fit', got {self.placement!r}")
        if self.hash_algo not in ("sha256", "sha256_cbor", "fast"):
            raise ValueError(f"hash_algo must be sha256, sha256_cbor or fast, got {self.hash_algo!r}")

    @property
    def capacity_slots(self) -> int:
        """Usable KV slots: (N - 1) x block_size; the null block is not capacity."""
        return (self.num_gpu_blocks - 1) * self.block_size


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """Where every usable KV slot is at one instant; the six categories sum to capacity.

    See ``allocator/waste.py`` for the definitions and the order in which a slot is
    classified. ``logical_slots`` (what the live sequences would need without sharing) and
    ``null_slots`` (the null block, reported apart from capacity) are extra facts, not
    categories.
    """

    capacity: int
    token_states: int
    reserved: int
    internal_frag: int
    cached_evictable: int
    external_frag: int
    free: int
    logical_slots: int = 0
    null_slots: int = 0

    CATEGORIES = (
        "token_states", "reserved", "internal_frag", "cached_evictable", "external_frag", "free",
    )

    def __post_init__(self) -> None:
        # Built once per simulated step: plain arithmetic, no dataclasses.fields() walk.
        total = (
            self.token_states + self.reserved + self.internal_frag
            + self.cached_evictable + self.external_frag + self.free
        )
        if min(self.token_states, self.reserved, self.internal_frag, self.cached_evictable,
               self.external_frag, self.free, self.logical_slots, self.null_slots) < 0:
            raise ValueError(f"MemorySnapshot has a negative category: {self}")
        if total != self.capacity:
            raise ValueError(
                f"MemorySnapshot categories sum to {total}, capacity is {self.capacity}: "
                + ", ".join(f"{n}={getattr(self, n)}" for n in self.CATEGORIES)
            )

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@runtime_checkable
class KVManager(Protocol):
    """What the simulator calls; the paged manager and every contiguous baseline implement it.

    Success of ``allocate_slots`` is any non-None value (the paged manager returns vLLM's
    ``KVCacheBlocks`` of newly allocated blocks); failure is ``None`` for every manager and
    leaves the manager as it was, except for what vLLM itself changes before failing.
    """

    block_size: int

    @classmethod
    def from_config(cls, config: ManagerConfig) -> KVManager: ...

    def get_computed_blocks(self, request: Request) -> tuple[Any, int]: ...

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Any = None,
        num_lookahead_tokens: int = 0,
    ) -> Any | None: ...

    def free(self, request: Request) -> None: ...

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]: ...

    def can_fork(self, parent_request: Request, child_request: Request) -> bool: ...

    def fork(self, parent_request: Request, child_request: Request) -> None: ...

    def take_copy_plan(self) -> CopyPlan: ...

    def swap_out(self, request: Request) -> CopyPlan: ...

    def swap_in(self, request: Request) -> CopyPlan: ...

    def can_swap_in(self, request: Request) -> bool: ...

    def memory_snapshot(self) -> MemorySnapshot: ...

    def check_invariants(self) -> None: ...
