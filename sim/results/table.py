"""The side-by-side comparison table printed on stdout at the end of a run (latencies in ms,
as ``vllm bench serve`` prints them; the summary keys stay in seconds)."""
from __future__ import annotations

from typing import Any

ROWS = (
    ("finished / rejected", None),
    ("throughput (req/s)", ("throughput_req_s", "{:.3f}", 1)),
    ("throughput (output tok/s)", ("throughput_tok_s", "{:.1f}", 1)),
    ("TTFT mean / p99 (ms)", None),
    ("TPOT mean / p99 (ms)", None),
    ("e2e latency mean / p99 (ms)", None),
    ("normalised latency (ms/token)", ("norm_latency_mean_s", "{:.2f}", 1000)),
    ("mean batch size (requests)", ("mean_batch_size", "{:.1f}", 1)),
    ("KV token states %", ("kv_token_states_frac", "{:.1f}", 100)),
    ("KV reserved %", ("kv_reserved_frac", "{:.1f}", 100)),
    ("KV internal frag %", ("kv_internal_frag_frac", "{:.1f}", 100)),
    ("KV external frag %", ("kv_external_frag_frac", "{:.1f}", 100)),
    ("KV cached (evictable) %", ("kv_cached_frac", "{:.1f}", 100)),
    ("KV free %", ("kv_free_frac", "{:.1f}", 100)),
    ("prefix hit rate %", ("prefix_hit_rate", "{:.1f}", 100)),
    ("preemptions", ("num_preemptions", "{:d}", None)),
    ("copy-on-write copies", ("num_cow_copies", "{:d}", None)),
    ("wall time (s)", ("wall_s", "{:.1f}", 1)),
)

EXTRA_ROWS = (
    ("mean acceptance length", ("mean_acceptance_length", "{:.2f}", 1)),
    ("draft blocks held (mean)", ("mean_draft_blocks_held", "{:.1f}", 1)),
    ("tokens per step", ("tokens_per_step", "{:.1f}", 1)),
    ("overlapped steps", ("num_overlapped_steps", "{:d}", None)),
)
"""Rows shown when the counters carry them (speculative decoding, async scheduling)."""


def _fmt(value: Any, fmt: str, scale: float | None) -> str:
    if value is None:
        return "-"
    return fmt.format(value * scale if scale is not None else value)


def _pair(s: dict[str, Any], a: str, b: str, fmt: str, scale: float = 1.0) -> str:
    return f"{_fmt(s[a], fmt, scale)} / {_fmt(s[b], fmt, scale)}"


def _cell(label: str, spec: Any, s: dict[str, Any]) -> str:
    if spec is not None:
        return _fmt(s[spec[0]], spec[1], spec[2])
    if label.startswith("finished"):
        return f"{s['num_finished']} / {s['num_rejected']}"
    if label.startswith("TTFT"):
        return _pair(s, "ttft_mean_s", "ttft_p99_s", "{:.1f}", 1000.0)
    if label.startswith("TPOT"):
        return _pair(s, "tpot_mean_s", "tpot_p99_s", "{:.1f}", 1000.0)
    return _pair(s, "e2el_mean_s", "e2el_p99_s", "{:.0f}", 1000.0)


def comparison_table(summaries: dict[str, dict[str, Any]],
                     counters: dict[str, dict[str, Any]] | None = None) -> str:
    """Metrics as rows, allocators (``summaries`` maps each to its summary) as columns,
    aligned for a terminal; ``counters`` add the rows of ``EXTRA_ROWS`` they hold."""
    if not summaries:
        return "no allocator completed"
    header = ["metric", *summaries]
    rows = [header]
    for label, spec in ROWS:
        rows.append([label] + [_cell(label, spec, s) for s in summaries.values()])
    for label, spec in EXTRA_ROWS:
        held = [(counters or {}).get(name, {}) for name in summaries]
        if any(spec[0] in c for c in held):
            rows.append([label] + [_fmt(c.get(spec[0]), *spec[1:]) for c in held])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for k, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
