"""Every name reports/ reads from the result files, in one place.

The simulator documents its files column by column in ``sim/results/results_schema.json``; this module
lists the subset the plots need (so a renamed column is fixed here only) and reads that schema
file by path, never by importing ``sim``. Labels and units for the summary table live here too.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reports.errors import ReportError

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "sim" / "results" / "results_schema.json"
SUPPORTED_SCHEMA_VERSIONS = (1,)

SUMMARY_FILE = "summary.json"
STEPS_FILE = "steps.parquet"
REQUESTS_FILE = "requests.parquet"
CONFIG_FILE = "config.json"
TRACE_SUMMARY_FILE = "trace_summary.json"
SWEEP_FILE = "sweep.parquet"
VERSION_KEY = "schema_version"
ALLOCATORS_KEY = "allocators"
COUNTERS_KEY = "counters"
# summary.json "counters" entries shown in the summary table: key -> (label, unit, kind)
COUNTER_KEYS: dict[str, tuple[str, str, str]] = {
    "num_steps": ("Engine steps", "", "int"),
    "num_truncated": ("Outputs truncated to max_model_len", "requests", "int"),
    "num_rejected_prompt_too_long": ("Rejected: prompt too long", "requests", "int"),
    "num_rejected_exceeds_pool": ("Rejected: larger than the KV pool", "requests", "int"),
    "num_swap_fallbacks": ("Swap preemptions done by recompute", "", "int"),
}

ALLOCATOR = "allocator"        # column naming the allocator in steps/requests/sweep tables

# steps.parquet
TIME = "time_s"
DURATION = "duration_s"
RUNNING = "num_running_reqs"
PREFIX_QUERIES = "prefix_queries"
PREFIX_HITS = "prefix_hits"
# (column, legend label); stacked bottom to top in this order
MEMORY_CATEGORIES = (
    ("token_states", "Token states"),
    ("reserved", "Reserved"),
    ("internal_frag", "Internal fragmentation"),
    ("external_frag", "External fragmentation"),
    ("cached_evictable", "Cached (evictable)"),
    ("free", "Free"),
)
STEP_COLUMNS = (TIME, DURATION, RUNNING, PREFIX_QUERIES, PREFIX_HITS,
                *(name for name, _ in MEMORY_CATEGORIES))

# requests.parquet
STATUS = "status"
FINISHED = "finished"
ARRIVAL = "arrival_s"
FIRST_TOKEN = "first_token_s"
FINISH = "finish_s"
OUTPUT_TOKENS = "output_tokens"
REQUEST_COLUMNS = (STATUS, ARRIVAL, FIRST_TOKEN, FINISH, OUTPUT_TOKENS)

# summary.json, per allocator: key -> (label, unit, kind); kind picks the number format
SUMMARY_KEYS: dict[str, tuple[str, str, str]] = {
    "num_requests": ("Requests", "", "int"),
    "num_finished": ("Finished", "", "int"),
    "num_rejected": ("Rejected", "", "int"),
    "duration_s": ("Duration", "s", "float"),
    "throughput_req_s": ("Throughput", "req/s", "float"),
    "throughput_tok_s": ("Output throughput", "tok/s", "float"),
    "ttft_mean_s": ("TTFT mean", "s", "time"),
    "ttft_p50_s": ("TTFT p50", "s", "time"),
    "ttft_p99_s": ("TTFT p99", "s", "time"),
    "tpot_mean_s": ("TPOT mean", "s", "time"),
    "tpot_p99_s": ("TPOT p99", "s", "time"),
    "e2el_mean_s": ("End-to-end latency mean", "s", "time"),
    "e2el_p99_s": ("End-to-end latency p99", "s", "time"),
    "norm_latency_mean_s": ("Normalised latency mean", "s/token", "time"),
    "mean_batch_size": ("Mean batch size", "requests", "float"),
    "kv_token_states_frac": ("KV: token states", "% of capacity", "pct"),
    "kv_reserved_frac": ("KV: reserved", "% of capacity", "pct"),
    "kv_internal_frag_frac": ("KV: internal fragmentation", "% of capacity", "pct"),
    "kv_external_frag_frac": ("KV: external fragmentation", "% of capacity", "pct"),
    "kv_cached_frac": ("KV: cached (evictable)", "% of capacity", "pct"),
    "kv_free_frac": ("KV: free", "% of capacity", "pct"),
    "prefix_hit_rate": ("Prefix cache hit rate", "% of prompt tokens", "pct"),
    "num_preemptions": ("Preemptions", "", "int"),
    "num_cow_copies": ("Copy-on-write copies", "blocks", "int"),
    "leaked_blocks": ("Leaked blocks", "blocks", "int"),
    "wall_s": ("Simulation wall time", "s", "float"),
}
# vllm bench serve's names for summary keys above: shown once, under the key above
VLLM_ALIASES = {
    "completed": "num_finished", "request_throughput": "throughput_req_s",
    "output_throughput": "throughput_tok_s", "mean_ttft_ms": "ttft_mean_s",
    "median_ttft_ms": "ttft_p50_s", "p50_ttft_ms": "ttft_p50_s", "p99_ttft_ms": "ttft_p99_s",
    "mean_tpot_ms": "tpot_mean_s", "p99_tpot_ms": "tpot_p99_s", "mean_e2el_ms": "e2el_mean_s",
    "p99_e2el_ms": "e2el_p99_s",
}
# summary fractions in MEMORY_CATEGORIES order
SUMMARY_FRACTIONS = (
    ("token_states", "kv_token_states_frac"),
    ("reserved", "kv_reserved_frac"),
    ("internal_frag", "kv_internal_frag_frac"),
    ("external_frag", "kv_external_frag_frac"),
    ("cached_evictable", "kv_cached_frac"),
    ("free", "kv_free_frac"),
)
# the occupied part of memory, as the paper's Fig. 2 bars divide it
OCCUPIED_CATEGORIES = ("token_states", "reserved", "internal_frag", "external_frag")

# sweep.parquet (or config.json of several runs): first present column wins
SWEEP_RATE_COLUMNS = ("request_rate", "rate_scale")
SWEEP_BLOCK_SIZE = "block_size"
SWEEP_CELL = "cell"            # cell name; its result directory is cells/NAME
SWEEP_CELLS_DIR = "cells"
SWEEP_STATUS = "status"
SWEEP_OK = "ok"
NORM_LATENCY = "norm_latency_mean_s"
DEFAULT_SLO_S = 0.2


def category_label(column: str) -> str:
    """Legend label of a memory category column."""
    return dict(MEMORY_CATEGORIES)[column]


def load_schema(path: Path = SCHEMA_PATH) -> dict[str, Any] | None:
    """The simulator's schema file, or None when this checkout has none.

    Raises:
        ReportError: the file exists but is not valid JSON.
    """
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: cannot read the result schema: {exc}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: the result schema is not a JSON object")
    return data


def check_version(data: dict[str, Any], path: Path) -> int:
    """The file's schema_version, refused when missing or unknown.

    Raises:
        ReportError: no schema_version, or one this reader does not know.
    """
    version = data.get(VERSION_KEY)
    if version is None:
        raise ReportError(f"{path}: no {VERSION_KEY!r} key (not a pagedsim result file?)")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        known = ", ".join(str(v) for v in SUPPORTED_SCHEMA_VERSIONS)
        raise ReportError(f"{path}: {VERSION_KEY} {version!r} is not supported "
                          f"(this reader knows {known})")
    return int(version)
