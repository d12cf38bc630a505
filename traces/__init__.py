"""pagedsim traces: real workload formats, vLLM-style datasets and synthetic generators.

Every loader and generator returns one validated, typed request stream (`Trace`) that
the simulator replays. Formats are auto-detected from content (`load_trace`); the datasets
and arrival processes of `vllm bench serve` (`random_dataset`, `sharegpt_dataset`,
`sonnet_dataset`, `request_arrivals`) and seeded synthetic workloads (`traces.synthetic`)
are deterministic; transformations return new traces; `load_workload` applies command-line
choices (traces/options.py). See traces/README.md.
"""
from __future__ import annotations

from traces import synthetic
from traces.arrivals import request_arrivals, with_request_rate
from traces.datasets import random_dataset, sonnet_dataset
from traces.errors import TraceError
from traces.loader import FORMATS, detect_format, load_trace
from traces.model import Trace, TraceMetadata, TraceRequest
from traces.prefixes import add_system_prompt, multi_turn
from traces.sharegpt import sharegpt_dataset
from traces.summary import ideal_prefix_reuse, summarize
from traces.synthetic import default_workload
from traces.tokenizer import load_tokenizer
from traces.tokens import derive_token_ids
from traces.transforms import clip_lengths, limit, retime, scale_rate, set_sampling, time_window
from traces.workload import WorkloadSpec, load_workload

__all__ = [
    "FORMATS", "Trace", "TraceError", "TraceMetadata", "TraceRequest", "WorkloadSpec",
    "add_system_prompt", "clip_lengths", "default_workload", "derive_token_ids",
    "detect_format", "ideal_prefix_reuse", "limit", "load_tokenizer", "load_trace",
    "load_workload", "multi_turn", "random_dataset", "request_arrivals", "retime",
    "scale_rate", "set_sampling", "sharegpt_dataset", "sonnet_dataset", "summarize",
    "synthetic", "time_window", "with_request_rate",
]
