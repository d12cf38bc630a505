"""Plain-text tables shared by the HTML and Markdown reports.

The summary table has one row per summary key (label and unit from reports/schema.py) and one
column per allocator; configuration and trace summary are flattened to ``key: value`` rows
(nested objects as dotted keys). Numbers are formatted for reading, not for round trips:
latencies always in ms (as vllm bench serve prints them), durations in s, fractions as
percentages, counts with thousands separators.
"""
from __future__ import annotations

import math
from typing import Any

from reports import schema as S

Row = tuple[str, str, list[str]]   # (label, unit, one cell per column)


def format_ms(ms: float) -> str:
    """A latency in milliseconds: "25.4 ms", "3,456 ms", "0.412 ms"."""
    if abs(ms) >= 100:
        return f"{ms:,.0f} ms"
    return f"{ms:.1f} ms" if abs(ms) >= 1 else f"{ms:.3g} ms"


def format_value(value: Any, kind: str = "auto") -> str:
    """A summary value for people (None: "n/a"). Kinds: "time" (seconds, shown in ms),
    "ms" (already ms), "pct" (a fraction), "int", "float", "auto"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if kind == "pct":
        return f"{100.0 * value:.1f}%"
    if kind == "int" or (kind == "auto" and isinstance(value, int)):
        return f"{int(value):,}"
    if kind in ("time", "ms"):
        return format_ms(1000.0 * value if kind == "time" else float(value))
    return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"


def summary_rows(summary: dict[str, dict[str, Any]],
                 counters: dict[str, dict[str, Any]] | None = None) -> list[Row]:
    """One row per summary key (extra keys the simulator added at the end), then counters."""
    names = list(summary)
    keys = list(S.SUMMARY_KEYS)
    for entry in summary.values():
        keys += [k for k in entry if k not in keys and S.VLLM_ALIASES.get(k) not in entry]
    rows = [_row(S.SUMMARY_KEYS.get(key, _extra_spec(key)),
                 [summary[n].get(key) for n in names]) for key in keys]
    counters = counters or {}
    for key, spec in S.COUNTER_KEYS.items():
        if any(key in counters.get(n, {}) for n in names):
            rows.append(_row(spec, [counters.get(n, {}).get(key) for n in names]))
    return rows


def _extra_spec(key: str) -> tuple[str, str, str]:
    """Label, unit and kind of a summary key the schema does not list (vLLM's *_ms names)."""
    return (key, "", "ms") if key.endswith("_ms") else (key, "", "auto")


def shown_unit(unit: str, kind: str) -> str:
    """The unit printed beside a label: latency cells carry "ms" themselves."""
    if kind in ("time", "ms"):
        return "per output token" if unit == "s/token" else ""
    return unit


def _row(spec: tuple[str, str, str], values: list[Any]) -> Row:
    label, unit, kind = spec
    return label, shown_unit(unit, kind), [format_value(v, kind) for v in values]


def flat_rows(data: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``key: value`` rows of a nested JSON object (lists of scalars joined by commas)."""
    rows: list[tuple[str, str]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += flat_rows(value, name + ".") if value else [(name, "{}")]
        elif isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
            rows.append((name, ", ".join(format_value(v) for v in value) or "[]"))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                rows += (flat_rows(item, f"{name}[{i}].") if isinstance(item, dict)
                         else [(f"{name}[{i}]", format_value(item))])
        else:
            rows.append((name, format_value(value)))
    return rows


def _get(data: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)  # type: ignore[assignment]
    return data


def headline(info: dict[str, Any], config: dict[str, Any], trace: dict[str, Any],
             allocators: list[str]) -> list[str]:
    """Short sentences describing the run, for the top of both reports."""
    source = _get(info, "trace", "path") or trace.get("source") or "the built-in workload"
    count, span, rate = trace.get("num_requests"), trace.get("span_s"), trace.get("rate_per_s")
    text = f"Trace: {source}"
    if count is not None:
        text += f", {format_value(count)} requests"
    if isinstance(span, (int, float)):
        text += f" over {span:,.0f} s"
    if isinstance(rate, (int, float)):
        text += f" ({rate:.3g} req/s)"
    scale = _get(config, "options", "rate_scale")
    if isinstance(scale, (int, float)) and scale != 1:
        text += f", replayed at {scale:g}x the trace's rate"
    lines = [text + "."]
    model, gpu = _get(config, "model", "name"), _get(config, "gpu", "name")
    tp = _get(config, "options", "tp")
    blocks = _get(config, "capacity", "num_gpu_blocks")
    block_size = _get(config, "scheduler", "block_size") or _get(config, "capacity",
                                                                 "block_size")
    setup = []
    if model:
        setup.append(f"{model} on {f'{tp} x ' if tp and tp != 1 else ''}{gpu or 'a GPU'}")
    if isinstance(blocks, int) and isinstance(block_size, int):
        setup.append(f"KV cache of {blocks:,} blocks x {block_size} tokens "
                     f"({(blocks - 1) * block_size:,} usable token slots)")
    if setup:
        lines.append("Setup: " + "; ".join(setup) + ".")
    lines.append("Allocators: " + ", ".join(allocators) + ".")
    if trace.get("tokens_estimated"):
        lines.append(f"Token counts are estimated, not measured: {trace.get('tokenizer')}.")
    return lines


def occupied_shares(entry: dict[str, Any]) -> dict[str, float] | None:
    """Fig. 2 split: each occupied category as % of the occupied memory (None if none)."""
    fractions = dict(S.SUMMARY_FRACTIONS)
    values = {c: float(entry.get(fractions[c]) or 0.0) for c in S.OCCUPIED_CATEGORIES}
    total = sum(values.values())
    if total <= 0:
        return None
    return {c: 100.0 * v / total for c, v in values.items()}


def capacity_shares(entry: dict[str, Any]) -> dict[str, float] | None:
    """Every category as the run's mean % of capacity (None when the run had no steps)."""
    values = {c: entry.get(key) for c, key in S.SUMMARY_FRACTIONS}
    if all(v is None for v in values.values()):
        return None
    return {c: 100.0 * float(v or 0.0) for c, v in values.items()}


def findings(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One plain sentence per allocator, then paged against max when both ran."""
    lines = []
    for name, entry in summary.items():
        shares = occupied_shares(entry)
        waste = None if shares is None else 1.0 - shares["token_states"] / 100.0
        parts = [f"{name}: " + (f"{format_value(waste, 'pct')} of the KV memory it held was "
                                "wasted" if waste is not None else "held no KV memory")]
        if entry.get("mean_batch_size") is not None:
            parts.append(f"mean batch {entry['mean_batch_size']:.1f} requests")
        if entry.get("norm_latency_mean_s") is not None:
            parts.append("normalised latency "
                         f"{format_value(entry['norm_latency_mean_s'], 'time')} per token")
        if entry.get("throughput_req_s") is not None:
            parts.append(f"{entry['throughput_req_s']:.3g} req/s")
        lines.append(", ".join(parts) + ".")
    paged, base = summary.get("paged"), summary.get("max")
    if paged and base and all(isinstance(e.get(k), (int, float)) and e[k] > 0
                              for e in (paged, base)
                              for k in ("mean_batch_size", "norm_latency_mean_s")):
        batch = paged["mean_batch_size"] / base["mean_batch_size"]
        latency = paged["norm_latency_mean_s"] / base["norm_latency_mean_s"]
        lines.append(f"paged relative to max: mean batch x{batch:.2f}, normalised latency "
                     f"x{latency:.2f}.")
    return lines
