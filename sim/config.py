"""A run's configuration: the frozen, resolved ``RunConfig`` built from the options.

``sim/cli.py`` resolves the options (``sim/options.py``, re-exported here) once into a
``RunConfig`` whose parts say what is simulated: the model, the GPUs, the cost model, the KV
cache, the scheduler, the workload and the outputs. Every value is frozen and validated when
built; a bad value raises ``OptionError``, one line naming the option. Nothing below the
command line sees an ``argparse.Namespace``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from allocator.profiles import DEFAULT_PROFILE, VllmProfile
from sim.cost.capacity import KVCapacity
from sim.cost.gpus import GpuSpec
from sim.cost.models import ModelConfig
from sim.cost.spec_cost import SpecConfig
from sim.options import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_ALLOCATORS,
    NON_NEGATIVE_OPTIONS,
    OPTION_TYPES,
    PLACEMENTS,
    PREEMPTION_MODES,
    SAMPLING_MODES,
    InputError,
    OptionError,
    Options,
    flag,
    spec_options,
)
from sim.release import scheduler_problem
from traces.workload import WorkloadSpec

__all__ = [  # the options are re-exported: callers name them as this module's
    "DEFAULT_ACCEPTANCE", "DEFAULT_ALLOCATORS", "OPTION_TYPES", "PLACEMENTS", "PREEMPTION_MODES",
    "SAMPLING_MODES", "CacheConfig", "CostConfig", "GpuConfig", "InputError", "OptionError",
    "Options", "OutputConfig", "RunConfig", "SchedulerConfig", "WorkloadConfig", "flag",
    "spec_options",
]


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """The hardware: ``tp`` identical GPUs running one model replica (tensor parallelism)."""

    spec: GpuSpec
    tp: int = 1


@dataclass(frozen=True, slots=True)
class CostConfig:
    """How a step and a request are priced: the step-time model spec (``--step-model``), the
    terms the GPU steps leave out (``--no-tp-comm``, ``--cpu-overhead-ms``,
    ``--cpu-per-seq-us``; sim/cost/step_extras.py) and the request's path outside the engine
    (sim/cost/api_path.py: fixed ms in, us per prompt token, fixed ms out). The path is off
    (zeros) when built directly; the command line resolves ``--api-overhead`` and its values
    (on by default for the auto, fit and calibrated step models)."""

    step_model: str = "auto"
    tp_comm: bool = True
    cpu_overhead_ms: float | None = None
    cpu_per_seq_us: float | None = None
    api_overhead_ms: float = 0.0
    tokenize_us_per_token: float = 0.0
    api_output_ms: float = 0.0

    def __post_init__(self) -> None:
        for name in NON_NEGATIVE_OPTIONS:
            if not getattr(self, name) >= 0:
                raise OptionError(name, f"{flag(name)} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """The KV cache every allocator manages.

    Attributes:
        num_gpu_blocks: pool size N in blocks (block 0 is the null block).
        block_size: tokens per block.
        num_cpu_blocks: CPU swap pool in blocks.
        kv_cache_dtype: auto (the model's dtype), fp16, bf16 or fp8.
        prefix_caching: prefix caching for the paged allocator.
        block_hash: "fast" (``sim/workload/block_hash.py``) or a vLLM hash name.
        placement: placement of contiguous regions (buddy or first-fit).
    """

    num_gpu_blocks: int
    block_size: int = 16
    num_cpu_blocks: int = 0
    kv_cache_dtype: str = "auto"
    prefix_caching: bool = True
    block_hash: str = "fast"
    placement: str = "buddy"

    def __post_init__(self) -> None:
        if self.num_gpu_blocks < 2:
            raise OptionError("num_gpu_blocks", "--num-gpu-blocks must be >= 2 (block 0 is the "
                                                f"null block), got {self.num_gpu_blocks}")

    @property
    def capacity_slots(self) -> int:
        """Usable KV slots, (N - 1) x block_size."""
        return (self.num_gpu_blocks - 1) * self.block_size


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """How the engine batches, admits and preempts (vLLM v1's defaults).

    Attributes:
        max_model_len: longest sequence (prompt + output).
        max_num_seqs: most sequences running at once.
        max_num_batched_tokens: token budget of one step.
        chunked_prefill: split long prefills over steps.
        preemption: "recompute" (vLLM v1) or "swap" (vLLM v0, needs CPU blocks).
        sampling_mode: n > 1: "cow" (one prefill, fork after it) or "fanout" (n requests).
        fast: use the fast path (``sim/sched/steady.py``) where it applies.
        debug: check invariants (and the fast path's snapshot) after every step.
        vllm_profile: the vLLM release followed (``allocator/profiles.py``; the admission
            gate, the lone-request rule and the priority rule read its switches). Built
            directly the default is 0.14 behaviour; the command line resolves
            ``--vllm-version`` (default 0.33).
        scheduling_policy: "fcfs" or "priority" (the trace's ``priority`` column).
        long_prefill_token_threshold: most tokens of one prefill chunk (0: no limit).
        max_num_active_seqs: most sequences admitted into the running set (None:
            ``max_num_seqs``; vLLM 0.31+).
        spec: speculative decoding (``--speculative-config``), or None.
        acceptance: per draft position, the chance it is accepted given the ones before.
        num_lookahead_tokens: draft slots reserved in ``allocate_slots`` (the release's rule).
        use_eagle: EAGLE drafts: prefix hits drop their last block unless the block hashes
            look ahead (0.33 with prefix caching, ``sched/spec_rules.py:set_eagle``).
        draft_slots: input slots each scheduled request also takes from the step's budget
            for its drafting (a draft model's sequential input, 0.33).
        async_scheduling: the next step is scheduled while one runs (``sched/async_sched.py``).
        async_skip_undelivered: preempted requests with an undelivered output wait for it.
    """

    max_model_len: int = 4096
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    preemption: str = "recompute"
    sampling_mode: str = "cow"
    fast: bool = True
    debug: bool = False
    vllm_profile: VllmProfile = DEFAULT_PROFILE
    scheduling_policy: str = "fcfs"
    long_prefill_token_threshold: int = 0
    max_num_active_seqs: int | None = None
    spec: SpecConfig | None = None
    acceptance: tuple[float, ...] = ()
    num_lookahead_tokens: int = 0
    use_eagle: bool = False
    draft_slots: int = 0
    async_scheduling: bool = False
    async_skip_undelivered: bool = False

    def __post_init__(self) -> None:
        problem = scheduler_problem(self.vllm_profile, self.scheduling_policy,
                                    self.long_prefill_token_threshold, self.max_num_active_seqs,
                                    self.max_num_seqs)
        if problem is not None:
            raise OptionError(*problem)
        if not self.chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise OptionError("max_num_batched_tokens", (
                f"without chunked prefill, --max-num-batched-tokens "
                f"({self.max_num_batched_tokens}) must be >= max_model_len ({self.max_model_len})"))


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """The requests: which trace, how it is replayed, and what each request asks for.

    Attributes:
        trace: trace file, or None for the built-in default workload.
        format: trace format (None: detected).
        rate_scale: replay at this times the trace's rate.
        limit: first N requests only.
        seed: seeds token ids and the beam model.
        n: parallel samples per request; None keeps the trace's value.
        beam_width: beam width; None keeps the trace's value (1: no beam search).
        beam_keep_prob: beam model: chance a new beam keeps its own parent.
        spec: every workload option (``traces.WorkloadSpec``); None: the fields above only.
        max_concurrency: most requests in flight from the client (None: no limit).
    """

    trace: str | None = None
    format: str | None = None
    rate_scale: float = 1.0
    limit: int | None = None
    seed: int = 0
    n: int | None = None
    beam_width: int | None = None
    beam_keep_prob: float = 0.75
    spec: WorkloadSpec | None = None
    max_concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class OutputConfig:
    """Where results go and what is recorded besides them."""

    out_dir: Path = Path("results") / "default"
    record_log: bool = False
    progress: bool = True


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything one run needs, resolved: the same for every allocator it compares.

    Invariants: the cache and scheduler fit the model (``max_model_len`` within its context,
    heads split over ``tp``), and swap preemption has CPU blocks.
    """

    model: ModelConfig
    gpu: GpuConfig
    cache: CacheConfig
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    allocators: tuple[str, ...] = ("paged",)
    jobs: int = 1
    capacity: KVCapacity | None = None

    def __post_init__(self) -> None:
        self.model.check_tp(self.gpu.tp)
        if self.scheduler.max_model_len > self.model.max_context_len:
            raise OptionError("max_model_len", (
                f"--max-model-len {self.scheduler.max_model_len} exceeds {self.model.name}'s "
                f"context length {self.model.max_context_len}"))
        if self.scheduler.preemption == "swap" and self.cache.num_cpu_blocks == 0:
            raise OptionError("swap_space", "--preemption swap needs --swap-space large enough "
                                            "for one block")
        if self.jobs < 1:
            raise OptionError("jobs", f"--jobs must be >= 1, got {self.jobs}")
