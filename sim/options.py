"""simulate.py's options as typed values, each checked on construction.

``Options`` holds the command line's options (or a sweep cell's ``dataclasses.replace`` of
them); a bad value raises ``OptionError``, one line naming the option (``flag`` spells it as
the command line does). ``sim/config.py`` builds the frozen ``RunConfig`` from them.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from sim.cost.spec_cost import SpecConfig, parse_acceptance, parse_spec_config
from sim.release import release_problem
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
NON_NEGATIVE_OPTIONS = ("api_overhead_ms", "tokenize_us_per_token", "api_output_ms")
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
        for name in NON_NEGATIVE_OPTIONS:
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
