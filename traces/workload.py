"""One workload from command-line choices: a trace file, a vLLM-style dataset, or the default.

`WorkloadSpec` holds every workload option of `python -m traces` and simulate.py (their names
are the options' dests); `load_workload(spec)` checks them together and returns the Trace:

    source   trace file (format detected) | --dataset-name random | sharegpt | sonnet |
             burstgpt | default (the built-in workload, also used when nothing is given)
    count    --num-prompts: requests generated or sampled (datasets; default 1000 as in vLLM),
             or the first N of a trace, like --limit
    times    --request-rate R [--burstiness B]: vLLM's schedule replaces the times;
             --rate-scale X: the trace's own times divided by X (not both)

Everything is validated before anything is simulated; bad choices raise TraceError naming
the option.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from traces.arrivals import check_rate, with_request_rate
from traces.datasets import random_dataset, sonnet_dataset
from traces.errors import TraceError
from traces.loader import load_trace
from traces.model import Trace
from traces.sharegpt import sharegpt_dataset
from traces.synthetic import default_workload
from traces.tokenizer import Tokenizer, load_tokenizer, vocab_size_of
from traces.transforms import limit, scale_rate

DATASET_NAMES = ("default", "random", "sharegpt", "sonnet", "burstgpt")
FILE_DATASETS = ("sharegpt", "sonnet", "burstgpt")
DEFAULT_NUM_PROMPTS = 1000


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Workload options; field names are the command-line options' dests."""

    trace: str | None = None
    format: str | None = None
    dataset_name: str | None = None
    dataset_path: str | None = None
    tokenizer: str | None = None
    sort: bool = False
    columns: Mapping[str, str] | None = None
    time_unit: str | None = None
    hash_block_size: int = 512
    num_prompts: int | None = None
    limit: int | None = None
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    sonnet_input_len: int = 550
    sonnet_output_len: int = 150
    sonnet_prefix_len: int = 200
    sharegpt_output_len: int | None = None
    request_rate: float | None = None
    burstiness: float = 1.0
    rate_scale: float = 1.0
    seed: int = 0


def dataset_of(spec: WorkloadSpec) -> str:
    """The source: a DATASET_NAMES entry, or "trace" for a trace file."""
    if spec.dataset_name is not None:
        return spec.dataset_name
    return "trace" if spec.trace is not None or spec.dataset_path is not None else "default"


def source_path(spec: WorkloadSpec) -> str | None:
    """The file the workload reads (trace or --dataset-path), or None."""
    if spec.trace is not None and spec.dataset_path is not None and \
            Path(spec.trace) != Path(spec.dataset_path):
        raise TraceError(f"a trace file ({spec.trace}) and --dataset-path "
                         f"({spec.dataset_path}) were both given; give one")
    return spec.dataset_path if spec.dataset_path is not None else spec.trace


def check_spec(spec: WorkloadSpec) -> None:
    """Refuse contradictory or meaningless option combinations (TraceError)."""
    name, path = dataset_of(spec), source_path(spec)
    if name not in DATASET_NAMES + ("trace",):
        raise TraceError(f"--dataset-name {name}: choose from {', '.join(DATASET_NAMES)}")
    if name in ("random", "default") and path is not None:
        raise TraceError(f"--dataset-name {name} reads no file, but {path} was given; use "
                         "--dataset-name sharegpt, sonnet or burstgpt for a dataset file")
    if name in FILE_DATASETS and path is None:
        raise TraceError(f"--dataset-name {name} needs a file: --dataset-path FILE")
    file_options = {"--format": (spec.format, ("trace",)),
                    "--columns": (spec.columns, ("trace",)),
                    "--time-unit": (spec.time_unit, ("trace",)),
                    "--sort": (spec.sort or None, ("trace", "burstgpt"))}
    for option, (value, allowed) in file_options.items():
        if value is not None and name not in allowed:
            raise TraceError(f"{option} applies to a trace file, but the workload is the "
                             f"{name} dataset")
    if spec.request_rate is not None and spec.rate_scale != 1.0:
        raise TraceError("--request-rate and --rate-scale cannot be combined: --request-rate "
                         "replaces the arrival times, --rate-scale scales the trace's own")
    if spec.request_rate is None and spec.burstiness != 1.0:
        raise TraceError("--burstiness shapes the --request-rate schedule; give "
                         "--request-rate too")
    if spec.request_rate is not None:
        check_rate(spec.request_rate, spec.burstiness)
    if spec.num_prompts is not None and spec.limit is not None:
        raise TraceError("--num-prompts and --limit both given; on a trace they mean the "
                         "same (the first N requests): give one")
    for flag, count in (("--num-prompts", spec.num_prompts), ("--limit", spec.limit)):
        if count is not None and count < 1:
            raise TraceError(f"{flag} {count}: must be >= 1")


def load_workload(spec: WorkloadSpec) -> Trace:
    """The workload `spec` describes, counted and timed; see the module docstring.

    Raises:
        TraceError: bad options or input, one line naming the option, file or line.
    """
    check_spec(spec)
    tokenizer = load_tokenizer(spec.tokenizer) if spec.tokenizer is not None else None
    trace = _source(spec, tokenizer)
    count = spec.num_prompts if spec.num_prompts is not None else spec.limit
    if count is not None and dataset_of(spec) in ("trace", "burstgpt", "default"):
        trace = limit(trace, count)
    if spec.request_rate is not None:
        return with_request_rate(trace, spec.request_rate, spec.burstiness, spec.seed)
    if spec.rate_scale != 1.0:
        return scale_rate(trace, spec.rate_scale, option="--rate-scale")
    return trace


def _source(spec: WorkloadSpec, tokenizer: Tokenizer | None) -> Trace:
    name, path = dataset_of(spec), source_path(spec)
    count = spec.num_prompts if spec.num_prompts is not None else DEFAULT_NUM_PROMPTS
    if name == "default":
        return default_workload(seed=spec.seed)
    if name == "random":
        vocab = vocab_size_of(tokenizer) if tokenizer is not None else 32000
        return random_dataset(count, spec.random_input_len, spec.random_output_len,
                              spec.random_range_ratio, spec.random_prefix_len, seed=spec.seed,
                              vocab_size=vocab)
    assert path is not None
    if name == "sharegpt":
        return sharegpt_dataset(path, count, tokenizer=tokenizer,
                                output_len=spec.sharegpt_output_len, seed=spec.seed)
    if name == "sonnet":
        return sonnet_dataset(path, count, spec.sonnet_input_len, spec.sonnet_output_len,
                              spec.sonnet_prefix_len, tokenizer=tokenizer, seed=spec.seed)
    fmt = "burstgpt" if name == "burstgpt" else spec.format
    trace = load_trace(path, fmt, sort=spec.sort, column_map=spec.columns,
                       tokenizer=tokenizer, time_unit=spec.time_unit, seed=spec.seed,
                       hash_block_size=spec.hash_block_size)
    if tokenizer is not None and trace.metadata.tokenizer is None:
        raise TraceError(f"--tokenizer: {path} gives token counts itself ({trace.metadata.format} "
                         "format); --tokenizer applies to text (ShareGPT, sonnet)")
    return trace
