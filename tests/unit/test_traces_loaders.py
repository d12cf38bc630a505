"""Unit tests for traces.loader and the format readers: real traces and small fixtures."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from traces import detect_format, load_trace
from traces.rawfile import read_raw

AZURE_2024 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.009930+00:00,2162,5
2024-05-10 00:00:00.500000+00:00,4000,12
2024-05-10 00:00:02.000000+00:00,100,1
"""
BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
"""
MOONCAKE_ROW = '{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}\n'


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_azure_2023_code_real(shared_traces: Path) -> None:
    """The Azure 2023 code trace loads with its documented size and means."""
    t = load_trace(shared_traces / "AzureLLMInferenceTrace_code.csv")
    assert len(t) == 8819 and t.metadata.format == "azure-2023"
    assert t.prompt_lens.mean() == pytest.approx(2048, abs=1)
    assert t.output_lens.mean() == pytest.approx(28, abs=0.5)
    assert t.prompt_lens.max() == 7437 and t.arrival_s[0] == 0.0
    assert 56 * 60 < t.metadata.span_s < 58 * 60
    assert t.arrival_s[1] == pytest.approx(0.052, abs=1e-7)
    assert t[0].line == 2


def test_azure_2023_conv_real(shared_traces: Path) -> None:
    """The Azure 2023 conversation trace loads with its documented size and means."""
    t = load_trace(shared_traces / "AzureLLMInferenceTrace_conv.csv")
    assert len(t) == 19366
    assert t.prompt_lens.mean() == pytest.approx(1155, abs=1)
    assert t.output_lens.mean() == pytest.approx(211, abs=0.5)
    assert t.prompt_lens.max() == 14050 and t.output_lens.max() == 1000
    assert len(t.metadata.sha256 or "") == 64


def test_mooncake_real(shared_traces: Path) -> None:
    """The Mooncake conversation trace keeps hash ids compact and expands on demand."""
    t = load_trace(shared_traces / "mooncake_conversation_trace.jsonl")
    assert len(t) == 12031 and t.metadata.format == "mooncake"
    assert t.prompt_lens.mean() == pytest.approx(12035, abs=1)
    assert t.output_lens.mean() == pytest.approx(343, abs=1)
    assert t.store is not None and len(t.store.values) == 288_500
    assert len(np.unique(t.store.values)) == 182_790
    assert len(t.prompt_token_ids(5)) == t.prompt_lens[5]
    assert t.has_token_ids and not t.metadata.notes


def test_azure_2024_timezone_aware(tmp_path: Path) -> None:
    """Azure 2024 rows with UTC offsets load as seconds from the first row."""
    t = load_trace(_write(tmp_path, "az24.csv", AZURE_2024))
    assert t.metadata.format == "azure-2024"
    assert np.allclose(t.arrival_s, [0.0, 0.49007, 1.99007])
    assert list(t.prompt_lens) == [2162, 4000, 100]


def test_burstgpt_skips_failed_rows(tmp_path: Path) -> None:
    """BurstGPT rows with 0 response tokens are skipped and counted."""
    t = load_trace(_write(tmp_path, "burst.csv", BURSTGPT))
    assert t.metadata.format == "burstgpt" and len(t) == 2
    assert t.metadata.num_skipped == 1 and t.metadata.num_rows == 3
    assert list(t.arrival_s) == [0.0, 113.0] and [r.line for r in t] == [2, 4]
    assert "1 failed rows" in t.metadata.notes[0]


def test_token_jsonl_with_and_without_ids(tmp_path: Path) -> None:
    """Token-id JSONL keeps explicit prompt ids and derives ids where they are absent."""
    rows = [{"input_toks": 3, "output_toks": 2, "arrival_time_ns": 1_000_000_000,
             "input_tok_ids": [5, 6, 7]},
            {"input_toks": 2, "output_toks": 4, "arrival_time_ns": 1_500_000_000}]
    path = _write(tmp_path, "tok.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    t = load_trace(path)
    assert t.metadata.format == "token-jsonl" and t.has_token_ids
    assert list(t.arrival_s) == [0.0, 0.5]
    assert list(t.prompt_token_ids(0)) == [5, 6, 7] and len(t.prompt_token_ids(1)) == 2


def test_vllm_records_array_jsonl_and_result(tmp_path: Path) -> None:
    """vLLM-style records load from a JSON array, JSON lines, or a result object."""
    arr = _write(tmp_path, "a.json", json.dumps(
        [{"prompt_len": 4, "output_len": 2, "arrival_time": 0.0, "request_id": "x"},
         {"prompt_len": 5, "output_len": 3, "arrival_time": 0.25, "request_id": "y"}]))
    t = load_trace(arr)
    assert list(t.request_ids) == ["x", "y"] and list(t.arrival_s) == [0.0, 0.25]
    lines = _write(tmp_path, "b.jsonl", '{"prompt_len": 4, "output_len": 2}\n'
                   '{"prompt_len": 8, "output_len": 1}\n')
    t2 = load_trace(lines)
    assert list(t2.prompt_lens) == [4, 8] and "time 0" in t2.metadata.notes[0]
    res = _write(tmp_path, "c.json", json.dumps({"input_lens": [3, 4], "output_lens": [5, 6]}))
    assert list(load_trace(res).output_lens) == [5, 6]


def test_sharegpt_with_tokenizer(tmp_path: Path) -> None:
    """ShareGPT conversations load with a caller's tokenizer (first two turns only), or
    without one on the character estimate, which the metadata records."""
    convs = [{"id": "c1", "conversations": [{"from": "human", "value": "a b c"},
                                            {"from": "gpt", "value": "d e"},
                                            {"from": "human", "value": "f"}]},
             {"id": "c2", "conversations": [{"from": "human", "value": "only"}]}]
    path = _write(tmp_path, "sg.json", json.dumps(convs))

    def tokenizer(text: str) -> list[int]:
        return [len(word) for word in text.split()]

    t = load_trace(path, tokenizer=tokenizer)
    assert t.metadata.format == "sharegpt" and len(t) == 1 and t.metadata.num_skipped == 1
    assert t[0].request_id == "c1" and t[0].output_len == 2
    assert list(t.prompt_token_ids(0)) == [1, 1, 1]
    assert t.metadata.tokenizer == "caller's tokenizer" and not t.metadata.tokens_estimated
    est = load_trace(path)
    assert est.metadata.tokens_estimated and "4 characters" in str(est.metadata.tokenizer)
    assert est[0].prompt_len == 2 and est[0].output_len == 1   # "a b c" 5 chars, "d e" 3


def test_generic_csv_and_jsonl_with_column_map(tmp_path: Path) -> None:
    """Generic CSV/JSONL load through a column map, with arrival units."""
    csv = _write(tmp_path, "g.csv", "ts,inp,out,rid\n1000,5,6,a\n3000,7,8,b\n")
    cmap = {"arrival": "ts", "prompt_len": "inp", "output_len": "out", "request_id": "rid"}
    t = load_trace(csv, column_map=cmap, time_unit="ms")
    assert t.metadata.format == "csv" and list(t.arrival_s) == [0.0, 2.0]
    assert list(t.request_ids) == ["a", "b"]
    jl = _write(tmp_path, "g.jsonl", '{"t": 1, "p": 3, "o": 4, "s": "u1", "k": 0}\n'
                '{"t": 4, "p": 5, "o": 6, "s": "u1", "k": 1}\n')
    t2 = load_trace(jl, column_map={"arrival": "t", "prompt_len": "p", "output_len": "o",
                                    "session_id": "s", "turn": "k"})
    assert t2[1].session_id == "u1" and t2[1].turn == 1 and t2.arrival_s[1] == 3.0


def test_gzip_with_gz_name_is_read(tmp_path: Path) -> None:
    """A .gz file is decompressed transparently and detected from its content."""
    path = tmp_path / "burst.csv.gz"
    path.write_bytes(gzip.compress(BURSTGPT.encode()))
    assert len(load_trace(path)) == 2


def test_detect_format_names(tmp_path: Path) -> None:
    """Detection picks the format from content, not from the file name."""
    cases = {"x.txt": (AZURE_2024, "azure"), "y.txt": (BURSTGPT, "burstgpt"),
             "z.txt": (MOONCAKE_ROW, "mooncake")}
    for name, (text, fmt) in cases.items():
        assert detect_format(read_raw(_write(tmp_path, name, text))) == fmt


def test_sort_option_orders_rows(tmp_path: Path) -> None:
    """sort=True orders out-of-order rows and notes it; lines keep their source rows."""
    text = BURSTGPT.replace("118,", "1,")
    t = load_trace(_write(tmp_path, "u.csv", text), sort=True)
    assert [r.line for r in t] == [4, 2] and "sorted 1" in t.metadata.notes[-1]


def test_jsonl_fast_and_exact_paths_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pyarrow column reader and the line-by-line reader build identical traces."""
    from traces import jsonl
    rows = [{"input_toks": 3, "output_toks": 2, "arrival_time_ns": 10, "request_id": "a",
             "input_tok_ids": [5, 6, 7]},
            {"input_toks": 2, "output_toks": 4, "arrival_time_ns": 20, "request_id": "b"},
            {"input_toks": 1, "output_toks": 1, "arrival_time_ns": 20, "request_id": "c",
             "input_tok_ids": [9]}]
    path = _write(tmp_path, "t.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    raw = read_raw(path)
    fast_table = jsonl._arrow_table(raw, ("input_toks",), ("input_tok_ids",), ("input_toks",))
    assert fast_table is not None and list(fast_table.lines) == [1, 2, 3]
    fast = load_trace(path)
    monkeypatch.setattr(jsonl, "_arrow_table", lambda *a: None)
    exact = load_trace(path)
    assert list(fast) == list(exact) and list(fast.request_ids) == ["a", "b", "c"]
    for i in range(3):
        assert np.array_equal(fast.prompt_token_ids(i), exact.prompt_token_ids(i))
    assert list(fast.prompt_token_ids(2)) == [9]


def test_serving_fields_in_every_record_format(tmp_path: Path) -> None:
    """Token-id JSONL, vLLM records and a generic CSV (--columns) all carry cache_salt,
    lora_name and priority; rows without them get none and priority 0."""
    tj = _write(tmp_path, "t.jsonl",
                '{"input_toks": 3, "output_toks": 1, "arrival_time_ns": 0, "cache_salt": "u1", '
                '"priority": 3}\n{"input_toks": 2, "output_toks": 1, "arrival_time_ns": 9, '
                '"lora_name": "sql"}\n')
    vr = _write(tmp_path, "v.json", json.dumps([
        {"prompt_len": 3, "output_len": 1, "lora_name": "sql"},
        {"prompt_len": 2, "output_len": 1, "priority": -4}]))
    gc = _write(tmp_path, "g.csv", "p,o,salt,prio\n3,1,u1,3\n2,1,,0\n")
    cmap = {"prompt_len": "p", "output_len": "o", "cache_salt": "salt", "priority": "prio"}
    got = {name: [(r.cache_salt, r.lora_name, r.priority) for r in t] for name, t in (
        ("tj", load_trace(tj)), ("vr", load_trace(vr)), ("gc", load_trace(gc, column_map=cmap)))}
    assert got["tj"] == [("u1", None, 3), (None, "sql", 0)]
    assert got["vr"] == [(None, "sql", 0), (None, None, -4)]
    assert got["gc"] == [("u1", None, 3), (None, None, 0)]


def test_acceptance_rate_column_per_request(tmp_path: Path) -> None:
    """acceptance_rate is read per request (a CSV through --columns and vLLM records); rows
    without it get None (the run's --acceptance-rate), and a trace slice keeps the column."""
    gc = _write(tmp_path, "g.csv", "p,o,acc\n3,1,0.25\n2,1,\n4,1,1\n")
    trace = load_trace(gc, column_map={"prompt_len": "p", "output_len": "o",
                                       "acceptance_rate": "acc"})
    assert [r.acceptance_rate for r in trace] == [0.25, None, 1.0]
    assert [r.acceptance_rate for r in trace.take([2, 0])] == [1.0, 0.25]
    vr = _write(tmp_path, "v.json", json.dumps([
        {"prompt_len": 3, "output_len": 1, "acceptance_rate": 0.5},
        {"prompt_len": 2, "output_len": 1}]))
    assert [r.acceptance_rate for r in load_trace(vr)] == [0.5, None]
    assert load_trace(_write(tmp_path, "n.json", json.dumps([
        {"prompt_len": 3, "output_len": 1}]))).acceptance_rates is None
