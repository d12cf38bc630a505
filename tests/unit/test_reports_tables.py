"""Tests of reports/tables.py: number formatting, flattening, shares and plain findings."""
from __future__ import annotations

from reports import schema as S
from reports.tables import (
    findings,
    flat_rows,
    format_value,
    headline,
    occupied_shares,
    summary_rows,
)

ENTRY = {"kv_token_states_frac": 0.2, "kv_reserved_frac": 0.1, "kv_internal_frag_frac": 0.06,
         "kv_external_frag_frac": 0.04, "kv_cached_frac": 0.0, "kv_free_frac": 0.6,
         "mean_batch_size": 8.0, "norm_latency_mean_s": 0.05, "throughput_req_s": 2.0}


def test_format_value_by_kind() -> None:
    """Fractions as percent, latencies always in ms, counts with separators."""
    assert format_value(0.1234, "pct") == "12.3%"
    assert format_value(0.0254, "time") == "25.4 ms"
    assert format_value(3.456, "time") == "3,456 ms"
    assert format_value(1620.7, "time") == "1,620,700 ms"
    assert format_value(0.000412, "time") == "0.412 ms"
    assert format_value(12.5, "ms") == "12.5 ms"
    assert format_value(19366) == "19,366"
    assert format_value(None) == "n/a" and format_value(float("nan")) == "n/a"


def test_occupied_shares_split_held_memory() -> None:
    """Held memory 0.4 of capacity splits 50/25/15/10 percent."""
    shares = occupied_shares(ENTRY)
    assert shares is not None
    assert [round(v, 6) for v in shares.values()] == [50.0, 25.0, 15.0, 10.0]
    assert occupied_shares({"kv_free_frac": 1.0}) is None


def test_findings_compare_paged_with_max() -> None:
    """One sentence per allocator and the paged-vs-max ratio of batch and latency."""
    slow = {**ENTRY, "mean_batch_size": 4.0, "norm_latency_mean_s": 0.1}
    lines = findings({"paged": ENTRY, "max": slow})
    assert lines[0].startswith("paged: 50.0% of the KV memory it held was wasted")
    assert "mean batch 8.0 requests" in lines[0] and "50.0 ms per token" in lines[0]
    assert lines[-1] == "paged relative to max: mean batch x2.00, normalised latency x0.50."


def test_flat_rows_use_dotted_keys() -> None:
    """Nested objects become dotted keys; lists of scalars are joined."""
    rows = flat_rows({"model": {"name": "M", "layers": 32}, "cmd": ["a", "b"], "x": None})
    assert rows == [("model.name", "M"), ("model.layers", "32"), ("cmd", "a, b"), ("x", "n/a")]


def test_summary_rows_append_counters() -> None:
    """Counters known to the schema follow the summary keys, one cell per allocator."""
    rows = summary_rows({"a": {"num_requests": 3}}, {"a": {"num_steps": 1200}})
    assert rows[0] == ("Requests", "", ["3"])
    assert rows[-1] == ("Engine steps", "", ["1,200"])
    assert len(rows) == len(S.SUMMARY_KEYS) + 1


def test_vllm_names_are_not_shown_twice() -> None:
    """A vLLM-named duplicate (mean_ttft_ms beside ttft_mean_s) is skipped; other *_ms keys
    are shown in ms."""
    entry = {"ttft_mean_s": 0.5, "mean_ttft_ms": 500.0, "std_ttft_ms": 12.25}
    rows = {label: cells for label, _, cells in summary_rows({"a": entry})}
    assert "mean_ttft_ms" not in rows and rows["std_ttft_ms"] == ["12.2 ms"]
    assert rows["TTFT mean"] == ["500 ms"]


def test_headline_says_when_token_counts_are_estimated() -> None:
    """A trace summary flagged tokens_estimated puts the estimate in the headline."""
    trace = {"num_requests": 3, "tokens_estimated": True,
             "tokenizer": "estimated: 4 characters per token"}
    lines = headline({}, {}, trace, ["paged"])
    assert lines[-1] == ("Token counts are estimated, not measured: estimated: 4 characters "
                         "per token.")
    assert not any("estimated" in line for line in headline({}, {}, {"num_requests": 3}, ["a"]))
