"""A run's configuration: the options as given, and the frozen, resolved ``RunConfig``.

``Options`` holds simulate.py's options as typed values (the command line's, or a sweep
cell's ``dataclasses.replace`` of them) and checks each one on construction. ``sim/cli.py``
resolves them once into a ``RunConfig`` whose parts say what is simulated: the model, the
GPUs, the cost model, the KV cache, the scheduler, the workload and the outputs. Every value
is frozen and validated when built; a bad value raises ``OptionError``, one line naming the
option. Nothing below the command line sees an ``argparse.Namespace``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from allocator.profiles import DEFAULT_PROFILE, VllmProfile
from sim.cost.capacity import KVCapacity
from sim.cost.gpus import GpuSpec
from sim.cost.models import ModelConfig
from sim.cost.spec_cost import SpecConfig, parse_acceptance, parse_spec_config
from sim.release import release_problem, scheduler_problem
from traces.workload import WorkloadSpec

DEFAULT_ALLOCATORS = "paged,paged-nocache,max,pow2,oracle,ft"
_WORKLOAD = WorkloadSpec()  # the dataset options' defaults live in traces/workload.py
PLACEMENTS = ("buddy", "first-fit")
PREEMPTION_MODES = ("recompute", "swap")
SAMPLING_MODES = ("cow", "fanout")
_CHOICES = {"placement": PLACEMENTS, "preemption": PREEMPTION_MODES,
            "sampling_mode": SAMPLING_MODES}
_POSITIVE = ("tp", "block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens",
             "max_model_len", "n", "beam_width", "limit", "jobs", "num_prompts",
             "max_concurrency")
_NON_NEGATIVE = ("api_overhead_ms", "tokenize_us_per_token", "api_output_ms")
_FLAGS = {"fast": "--no-fast", "progress": "--no-progress", "trace": "TRACE"}


class InputError(ValueError):
    """Invalid options or unreadable input (one line): simulate.py exits with status 2."""


class OptionError(InputError):
    """A refused option value; ``option`` is its name (snake_case) when known."""

    def __init__(self, option: str | None, message: str) -> None:
        super().__init__(message)
        self.option = option


def flag(option: str) -> str:
    """The command-line spelling of an option name (``block_size`` -> ``--block-size``)."""
    return _FLAGS.get(option, "--" + option.replace("_", "-"))


@dataclass(frozen=True, slots=True)
class Options:
    """simulate.py's options, one field per command-line option (see ``sim/cli.py``)."""

    trace: str | None = None
    format: str | None = None
    allocators: str = DEFAULT_ALLOCATORS
    placement: str = "buddy"
    model: str = "llama-2-7b"
    kv_cache_dtype: str = "auto"
    gpu: str = "a100-80gb"
    gpu_mem_gib: float | None = None
    gpu_hbm_gbps: float | None = None
    gpu_tflops: float | None = None
    gpu_pcie_gbps: float | None = None
    tp: int = 1
    step_model: str = "auto"
    block_size: int = 16
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    chunked_prefill: bool = True
    prefix_caching: bool = True
    preemption: str = "recompute"
    swap_space: float = 4.0
    n: int | None = None
    beam_width: int | None = None
    sampling_mode: str = "cow"
    beam_keep_prob: float = 0.75
    block_hash: str = "fast"
    rate_scale: float = 1.0
    limit: int | None = None
    seed: int = 0
    jobs: int | None = None
    out: str | None = None
    record_allocation_log: bool = False
    debug: bool = False
    fast: bool = True
    progress: bool = True
    report: bool = False
    validate: bool = False
    sweep: str | None = None
    vllm_version: str = "0.33"
    vllm_overrides: tuple[str, ...] = ()
    scheduling_policy: str = "fcfs"
    long_prefill_token_threshold: int = 0
    max_num_active_seqs: int | None = None
    dataset_name: str | None = None
    dataset_path: str | None = None
    num_prompts: int | None = None
    random_input_len: int = _WORKLOAD.random_input_len
    random_output_len: int = _WORKLOAD.random_output_len
    random_range_ratio: float = _WORKLOAD.random_range_ratio
    random_prefix_len: int = _WORKLOAD.random_prefix_len
    sonnet_input_len: int = _WORKLOAD.sonnet_input_len
    sonnet_output_len: int = _WORKLOAD.sonnet_output_len
    sonnet_prefix_len: int = _WORKLOAD.sonnet_prefix_len
    sharegpt_output_len: int | None = None
    request_rate: float | None = None
    burstiness: float = _WORKLOAD.burstiness
    tokenizer: str | None = None
    sort: bool = False
    columns: dict[str, str] | None = None
    time_unit: str | None = None
    hash_block_size: int = _WORKLOAD.hash_block_size
    max_concurrency: int | None = None
    goodput: tuple[str, ...] | None = None
    percentile_metrics: str = "ttft,tpot,itl,e2el"
    metric_percentiles: str = "99"
    json: str | None = None
    list: str | None = None
    async_scheduling: bool | None = None
    speculative_config: str | None = None
    acceptance_rate: str | None = None
    tp_comm: bool = True
    cpu_overhead_ms: float | None = None
    cpu_per_seq_us: float | None = None
    api_overhead: bool | None = None
    api_overhead_ms: float | None = None
    tokenize_us_per_token: float | None = None
    api_output_ms: float | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "vllm_overrides", tuple(self.vllm_overrides or ()))
        problem = release_problem(self.vllm_version, self.vllm_overrides, self.scheduling_policy,
                                  self.long_prefill_token_threshold, self.max_num_active_seqs,
                                  self.max_num_seqs)
        if problem is not None:
            raise OptionError(*problem)
        for name in _POSITIVE:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise OptionError(name, f"{flag(name)} must be >= 1, got {value}")
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise OptionError(name, f"{flag(name)}: invalid choice {getattr(self, name)!r} "
                                        f"(choose from {', '.join(choices)})")
        if not self.swap_space >= 0:
            raise OptionError("swap_space", f"--swap-space must be >= 0, got {self.swap_space}")
        if not self.rate_scale > 0:
            raise OptionError("rate_scale", f"--rate-scale must be > 0, got {self.rate_scale}")
        if not 0.0 <= self.beam_keep_prob <= 1.0:
            raise OptionError("beam_keep_prob", "--beam-keep-prob must be in [0, 1], got "
                                                f"{self.beam_keep_prob}")
        for name in _NON_NEGATIVE:
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise OptionError(name, f"{flag(name)} must be >= 0, got {value}")
        spec_options(self)


def spec_options(o: Options) -> tuple[SpecConfig | None, tuple[float, ...]]:
    """``--speculative-config`` and ``--acceptance-rate`` parsed (OptionError if bad): the
    setup, or None, and the per-position acceptance probabilities (default 0.7 each)."""
    if o.speculative_config is None:
        if o.acceptance_rate is not None:
            raise OptionError("acceptance_rate", "--acceptance-rate needs --speculative-config")
        return None, ()
    try:
        spec = parse_spec_config(o.speculative_config)
    except ValueError as exc:
        raise OptionError("speculative_config", f"--speculative-config {exc}") from None
    try:
        rates = parse_acceptance(o.acceptance_rate or str(DEFAULT_ACCEPTANCE), spec.k)
    except ValueError as exc:
        raise OptionError("acceptance_rate", f"--acceptance-rate {exc}") from None
    return spec, rates


DEFAULT_ACCEPTANCE = 0.7
"""Default chance that a draft token is accepted, for every position."""

OPTION_TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(Options)}
"""Each option's type as written above ("int | None", "bool", ...), for converting values."""


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
        for name in _NON_NEGATIVE:
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
