"""pagedsim traces: real workload formats and synthetic generators.

Every loader and generator returns one validated, typed request stream (`Trace`) that
the simulator replays. Formats are auto-detected from content (`load_trace`); synthetic
workloads are seeded and deterministic (`traces.synthetic`); transformations return new
traces. See traces/README.md for formats, the data model and token-id derivation.
"""
from __future__ import annotations

from traces import synthetic
from traces.errors import TraceError
from traces.loader import FORMATS, detect_format, load_trace
from traces.model import Trace, TraceMetadata, TraceRequest
from traces.prefixes import add_system_prompt, multi_turn
from traces.summary import ideal_prefix_reuse, summarize
from traces.synthetic import default_workload
from traces.tokens import derive_token_ids
from traces.transforms import clip_lengths, limit, retime, scale_rate, set_sampling, time_window

__all__ = [
    "FORMATS", "Trace", "TraceError", "TraceMetadata", "TraceRequest", "add_system_prompt",
    "clip_lengths", "default_workload", "derive_token_ids", "detect_format",
    "ideal_prefix_reuse", "limit", "load_trace", "multi_turn", "retime", "scale_rate",
    "set_sampling", "summarize", "synthetic", "time_window",
]
