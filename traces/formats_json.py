"""JSON trace formats: Mooncake, token-id JSONL, vLLM-benchmark records, generic JSONL.

Mooncake rows list `hash_ids` of 512-token prefix blocks; they are kept compact (one
int64 per block) and expanded into token ids per request on demand, so the conversation
trace's ~145M prompt tokens are never held at once. Token-id JSONL may carry explicit
prompt ids, stored flat with per-row offsets. Files are read column-wise (jsonl.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped,unused-ignore]

from traces.columns import (
    SERVING_FIELDS,
    Columns,
    build_trace,
    length_column,
    number_column,
    serving_columns,
)
from traces.errors import TraceError
from traces.formats_csv import mapped_columns
from traces.jsonl import Table, read_table, table_from_records
from traces.model import Trace
from traces.rawfile import RawFile, parse_json
from traces.tokens import TokenStore

VLLM_TIME_KEYS = ("arrival_s", "arrival_time", "timestamp")


def _num(raw: RawFile, table: Table, key: str, **kw: Any) -> Any:
    return number_column(raw, table.scalars[key], table.lines, key, **kw)


def _len(raw: RawFile, table: Table, key: str) -> Any:
    return length_column(raw, table.scalars[key], table.lines, key)


def load_mooncake(raw: RawFile, *, sort: bool, seed: int = 0, block_size: int = 512) -> Trace:
    """Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids.

    Each row must list exactly ceil(input_length / block_size) hash ids (one per block,
    the last one possibly partial); any other count is an error naming the line.
    """
    keys = ("timestamp", "input_length", "output_length")
    table = read_table(raw, keys, ("hash_ids",), keys + ("hash_ids",))
    prompt = _len(raw, table, "input_length")
    values, offsets, _ = table.lists["hash_ids"]
    _check_hash_counts(raw, table, prompt, np.diff(offsets), block_size)
    cols = Columns("mooncake", _num(raw, table, "timestamp", integer=False, minimum=0) / 1e3,
                   prompt, _len(raw, table, "output_length"),
                   table.lines, "timestamp", num_rows=table.num_rows,
                   store=TokenStore("hash", values, offsets, block_size),
                   token_src=np.arange(table.num_rows, dtype=np.int64))
    return build_trace(raw, cols, sort=sort, seed=seed)


def _check_hash_counts(raw: RawFile, table: Table, prompt: Any, counts: Any,
                       block_size: int) -> None:
    """Refuse the first row whose hash id count does not match its input length."""
    need = -(-prompt // block_size)
    bad = np.flatnonzero(counts != need)
    if not bad.size:
        return
    k = int(bad[0])
    raise TraceError(f"{raw.path}:{table.lines[k]}: field 'hash_ids': {counts[k]} ids, but "
                     f"input_length {prompt[k]} needs {need[k]} blocks of {block_size} tokens "
                     "(for a file written with other blocks, give their size with "
                     "--hash-block-size)")


def load_token_jsonl(raw: RawFile, *, sort: bool, seed: int = 0) -> Trace:
    """Token-id JSONL: input_toks, output_toks, arrival_time_ns, optional input_tok_ids,
    request_id, cache_salt, lora_name and priority."""
    keys = ("input_toks", "output_toks", "arrival_time_ns")
    table = read_table(raw, keys + ("request_id", *SERVING_FIELDS), ("input_tok_ids",), keys)
    prompt = _len(raw, table, "input_toks")
    cols = Columns("token-jsonl",
                   _num(raw, table, "arrival_time_ns", integer=False, minimum=0) / 1e9,
                   prompt, _len(raw, table, "output_toks"),
                   table.lines, "arrival_time_ns", num_rows=table.num_rows)
    _attach(raw, table, cols, "input_tok_ids", "input_toks")
    return build_trace(raw, cols, sort=sort, seed=seed)


def _attach(raw: RawFile, table: Table, cols: Columns, key: str, len_key: str) -> None:
    """Explicit prompt ids (where present), request ids (when every row has one) and the
    optional serving fields (cache_salt, lora_name, priority, acceptance_rate)."""
    cols.extra.update(serving_columns(raw, {k: table.scalars[k] for k in SERVING_FIELDS},
                                      table.lines))
    ids = table.scalars["request_id"]
    if table.num_rows and not ids.isna().any():
        cols.ids = ids.astype(str).to_numpy(dtype=np.str_)
    values, offsets, has = table.lists[key]
    if not has.any():
        return
    counts = np.diff(offsets)
    bad = np.flatnonzero(has & (counts != cols.prompt))
    if bad.size:
        k = int(bad[0])
        raise TraceError(f"{raw.path}:{table.lines[k]}: field '{key}': has {counts[k]} ids "
                         f"but {len_key} is {cols.prompt[k]}")
    cols.store = TokenStore("explicit", values, offsets)
    cols.token_src = np.where(has, np.arange(table.num_rows), -1).astype(np.int64)


def load_vllm_records(raw: RawFile, *, sort: bool, seed: int = 0) -> Trace:
    """vLLM-benchmark-style records with prompt_len / output_len (JSON array or JSONL).

    Also accepts a benchmark result object with parallel `input_lens` / `output_lens`
    lists. Optional per-record keys: arrival_s | arrival_time | timestamp (seconds),
    request_id, prompt_token_ids, cache_salt, lora_name, priority, acceptance_rate. Without
    times every request arrives at 0.
    """
    table = _vllm_table(raw)
    prompt = _len(raw, table, "prompt_len")
    tkey = next((k for k in VLLM_TIME_KEYS if not table.scalars[k].isna().all()), None)
    arrival = (np.zeros(table.num_rows) if tkey is None else
               _num(raw, table, tkey, integer=False, minimum=0))
    cols = Columns("vllm", arrival, prompt,
                   _len(raw, table, "output_len"),
                   table.lines, tkey or "arrival_time", num_rows=table.num_rows)
    if tkey is None:
        cols.notes.append("no arrival times: all requests arrive at time 0")
    _attach(raw, table, cols, "prompt_token_ids", "prompt_len")
    return build_trace(raw, cols, sort=sort, seed=seed)


def _vllm_table(raw: RawFile) -> Table:
    scalars = ("prompt_len", "output_len", "request_id", *SERVING_FIELDS) + VLLM_TIME_KEYS
    lists, required = ("prompt_token_ids",), ("prompt_len", "output_len")
    if raw.data.lstrip()[:1] != b"[" and b"input_lens" not in raw.data[:4096]:
        return read_table(raw, scalars, lists, required)
    doc = parse_json(raw)
    if isinstance(doc, dict) and "input_lens" in doc and "output_lens" in doc:
        doc = [{"prompt_len": p, "output_len": o}
               for p, o in zip(doc["input_lens"], doc["output_lens"], strict=False)]
    if not isinstance(doc, list) or not doc or not all(isinstance(r, dict) for r in doc):
        raise TraceError(f"{raw.path}: expected a non-empty JSON array of request objects")
    lines = np.arange(1, len(doc) + 1, dtype=np.int64)
    return table_from_records(raw, doc, lines, scalars, lists, required)


def load_generic_jsonl(
    raw: RawFile, column_map: Mapping[str, str], *, sort: bool, seed: int = 0,
    time_unit: str | None = None,
) -> Trace:
    """Any JSONL, given which keys hold arrival, prompt_len, output_len (and optional ids)."""
    keys = tuple(dict.fromkeys(column_map.values()))
    table = read_table(raw, keys, (), keys)
    cols = mapped_columns(raw, pd.DataFrame(table.scalars), table.lines, column_map, "jsonl",
                          time_unit)
    return build_trace(raw, cols, sort=sort, seed=seed)
