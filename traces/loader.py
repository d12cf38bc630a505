"""`load_trace`: one entry point for every supported format, detected from content.

Detection looks at the first bytes only: JSON documents and JSON lines are told apart
by their first record's keys, CSV files by their header. An explicit `format` skips
detection; a `column_map` selects the generic CSV/JSONL reader. Every failure is a
TraceError and no partial trace is ever returned.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from traces.errors import TraceError
from traces.formats_csv import (
    AZURE_COLUMNS,
    BURSTGPT_COLUMNS,
    load_azure,
    load_burstgpt,
    load_generic_csv,
)
from traces.formats_json import (
    load_generic_jsonl,
    load_mooncake,
    load_token_jsonl,
    load_vllm_records,
)
from traces.model import Trace
from traces.rawfile import RawFile, read_raw
from traces.sharegpt import load_sharegpt
from traces.tokenizer import Tokenizer

FORMATS = ("azure", "burstgpt", "mooncake", "token-jsonl", "vllm", "sharegpt", "csv", "jsonl")
_ALIASES = {"azure-2023": "azure", "azure-2024": "azure", "azure2023": "azure",
            "azure2024": "azure", "token_jsonl": "token-jsonl", "generic-csv": "csv",
            "generic-jsonl": "jsonl"}
_KEY_FORMATS = (("hash_ids", "mooncake"), ("input_toks", "token-jsonl"),
                ("prompt_len", "vllm"), ("conversations", "sharegpt"))


def _first_line(raw: RawFile) -> str:
    for line in raw.data[:65536].decode("utf-8", errors="replace").split("\n"):
        if line.strip():
            return line.strip()
    return ""


def _json_format(raw: RawFile, first: str, has_map: bool) -> str:
    if first.startswith("["):
        head = raw.data[:65536].decode("utf-8", errors="replace")
        keys = {k for k, _ in _KEY_FORMATS if f'"{k}"' in head}
    else:
        try:
            rec = json.loads(first)
        except json.JSONDecodeError:
            if "input_lens" in first or first == "{":
                return "vllm"
            raise TraceError(f"{raw.path}:1: invalid or truncated JSON line") from None
        keys = set(rec) if isinstance(rec, dict) else set()
        if "input_lens" in keys:
            return "vllm"
    for key, fmt in _KEY_FORMATS:
        if key in keys:
            return fmt
    if has_map and not first.startswith("["):
        return "jsonl"
    raise TraceError(f"{raw.path}:1: cannot detect the JSON trace format (keys "
                     f"{sorted(keys)[:8]}); expected one of {[k for k, _ in _KEY_FORMATS]}; "
                     "give --format, or --columns NAME=COL,... for another layout")


def _csv_format(raw: RawFile, first: str, has_map: bool) -> str:
    header = [h.strip().strip('"') for h in first.split(",")]
    if has_map:
        return "csv"
    if all(c in header for c in AZURE_COLUMNS):
        return "azure"
    if all(c in header for c in BURSTGPT_COLUMNS):
        return "burstgpt"
    lower = {h.lower() for h in header}
    for known in (AZURE_COLUMNS, BURSTGPT_COLUMNS):
        missing = [c for c in known if c not in header]
        if len(missing) < len(known) or any(c.lower() in lower for c in known):
            raise TraceError(f"{raw.path}:1: field '{missing[0]}': missing column (header "
                             f"has {header[:8]}); give --format, or --columns NAME=COL,... "
                             "if this is another layout")
    raise TraceError(f"{raw.path}:1: cannot detect the CSV trace format from header "
                     f"{header[:8]} (Azure needs {AZURE_COLUMNS}, BurstGPT "
                     f"{BURSTGPT_COLUMNS}); give --format, or --columns NAME=COL,...")


def detect_format(raw: RawFile, has_map: bool = False) -> str:
    """Format name for a file's content (see FORMATS)."""
    first = _first_line(raw)
    if first.startswith(("{", "[")):
        return _json_format(raw, first, has_map)
    return _csv_format(raw, first, has_map)


def load_trace(
    path: str | Path, format: str | None = None, *, sort: bool = False,
    column_map: Mapping[str, str] | None = None, tokenizer: Tokenizer | None = None,
    time_unit: str | None = None, seed: int = 0, hash_block_size: int = 512,
) -> Trace:
    """Load a trace file into a validated Trace.

    Args:
        path: the file (.gz is decompressed).
        format: one of FORMATS, or None to detect from content.
        sort: sort rows by arrival instead of rejecting out-of-order timestamps.
        column_map: {field: column} for generic CSV/JSONL; fields arrival, prompt_len,
            output_len, and optional request_id, session_id, turn, n, beam_width,
            cache_salt, lora_name, priority, acceptance_rate.
        tokenizer: str -> token ids for ShareGPT text (traces.tokenizer.load_tokenizer);
            without one, the character estimate (recorded in the metadata).
        time_unit: unit of a generic arrival column: s, ms, us, ns or datetime.
        seed: seed for derived token ids.
        hash_block_size: tokens per Mooncake hash id.

    Raises:
        TraceError: any malformed input; the message names file, line and field.
    """
    raw = read_raw(path)
    fmt = format.lower() if format else detect_format(raw, column_map is not None)
    fmt = _ALIASES.get(fmt, fmt)
    if fmt in ("csv", "jsonl") and column_map is None:
        raise TraceError(f"{raw.path}: --format {fmt} needs --columns NAME=COL,... (at least "
                         "prompt_len=COL,output_len=COL)")
    if fmt == "azure":
        return load_azure(raw, sort=sort, seed=seed)
    if fmt == "burstgpt":
        return load_burstgpt(raw, sort=sort, seed=seed)
    if fmt == "mooncake":
        return load_mooncake(raw, sort=sort, seed=seed, block_size=hash_block_size)
    if fmt == "token-jsonl":
        return load_token_jsonl(raw, sort=sort, seed=seed)
    if fmt == "vllm":
        return load_vllm_records(raw, sort=sort, seed=seed)
    if fmt == "sharegpt":
        return load_sharegpt(raw, tokenizer, seed=seed, sort=sort)
    if fmt == "csv" and column_map is not None:
        return load_generic_csv(raw, column_map, sort=sort, seed=seed, time_unit=time_unit)
    if fmt == "jsonl" and column_map is not None:
        return load_generic_jsonl(raw, column_map, sort=sort, seed=seed, time_unit=time_unit)
    raise TraceError(f"{raw.path}: --format {format}: unknown (choose from {', '.join(FORMATS)})")
