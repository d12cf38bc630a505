"""Bad-input tests: every malformed trace gives one TraceError line naming file, line and
field, and nothing is returned."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from traces import TraceError, load_trace

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW1 = "2023-11-16 18:17:03.9799600,4808,10\n"
ROW2 = "2023-11-16 18:17:04.0319600,3180,8\n"


def _expect(path: Path, *parts: str, **kwargs: object) -> str:
    with pytest.raises(TraceError) as info:
        load_trace(path, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    for part in parts:
        assert part in message, message
    return message


def _csv(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_missing_column(tmp_path: Path) -> None:
    """A header without a required column names that column."""
    path = _csv(tmp_path, "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,4808\n")
    _expect(path, ":1:", "'GeneratedTokens'", "missing column")
    _expect(path, ":1:", "'GeneratedTokens'", format="azure")


def test_misnamed_column(tmp_path: Path) -> None:
    """A misspelt column name is reported as the expected column missing."""
    path = _csv(tmp_path, "Timestamp,ContextTokens,GeneratedTokens\n" + ROW1)
    _expect(path, ":1:", "'TIMESTAMP'", "missing column")


def test_non_numeric_length(tmp_path: Path) -> None:
    """A word where a length belongs names the line, field and value."""
    path = _csv(tmp_path, HEADER + ROW1 + "2023-11-16 18:17:04.0319600,lots,8\n")
    _expect(path, ":3:", "'ContextTokens'", "'lots'")


def test_negative_length(tmp_path: Path) -> None:
    """A negative length is rejected with its line."""
    path = _csv(tmp_path, HEADER + ROW1 + "2023-11-16 18:17:04.0319600,3180,-8\n")
    _expect(path, ":3:", "'GeneratedTokens'", "negative")


def test_fractional_length(tmp_path: Path) -> None:
    """A fractional token count is rejected."""
    path = _csv(tmp_path, HEADER + "2023-11-16 18:17:04.0319600,31.5,8\n")
    _expect(path, ":2:", "'ContextTokens'", "not an integer")


def test_nan_length(tmp_path: Path) -> None:
    """NaN or an empty cell is rejected with its line."""
    _expect(_csv(tmp_path, HEADER + ROW1 + "2023-11-16 18:17:04.0319600,NaN,8\n"),
            ":3:", "'ContextTokens'", "NaN")
    _expect(_csv(tmp_path, HEADER + "2023-11-16 18:17:04.0319600,5,\n", "e.csv"),
            ":2:", "'GeneratedTokens'", "missing")
    jl = tmp_path / "n.jsonl"
    jl.write_text('{"timestamp": 0, "input_length": NaN, "output_length": 1, "hash_ids": [1]}\n')
    _expect(jl, ":1:", "'input_length'", "NaN")


def test_bad_timestamp(tmp_path: Path) -> None:
    """An unparseable wall-clock time names its line."""
    _expect(_csv(tmp_path, HEADER + ROW1 + "yesterday,3180,8\n"), ":3:", "'TIMESTAMP'",
            "not a timestamp")


def test_empty_file(tmp_path: Path) -> None:
    """Empty files, header-only CSVs and blank JSONL files are rejected."""
    _expect(_csv(tmp_path, "", "a.csv"), "empty file")
    _expect(_csv(tmp_path, HEADER, "b.csv"), "empty file")
    _expect(_csv(tmp_path, "\n\n", "c.jsonl"), "empty file")


def test_truncated_jsonl_line(tmp_path: Path) -> None:
    """A JSONL file cut mid-record names the broken line."""
    good = '{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}\n'
    path = tmp_path / "t.jsonl"
    path.write_text(good + good + good[:30] + "\n")
    _expect(path, ":3:", "truncated")


def test_missing_jsonl_field(tmp_path: Path) -> None:
    """A record lacking a required key names the key and its line."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}\n'
                    '{"timestamp": 5, "input_length": 3, "hash_ids": [1]}\n')
    _expect(path, ":2:", "'output_length'", "missing")


def test_bad_hash_ids(tmp_path: Path) -> None:
    """hash_ids must be a list of non-negative integers."""
    path = tmp_path / "h.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}\n'
                    '{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": "x"}\n')
    _expect(path, ":2:", "'hash_ids'")


def test_unsorted_timestamps(tmp_path: Path) -> None:
    """Out-of-order times are an error unless sort=True is given."""
    path = _csv(tmp_path, HEADER + ROW2 + ROW1)
    _expect(path, ":3:", "'TIMESTAMP'", "not sorted", "sort=True")
    t = load_trace(path, sort=True)
    assert list(t.prompt_lens) == [4808, 3180]


def test_duplicate_ids(tmp_path: Path) -> None:
    """Two records with one request id name the second one's line."""
    path = tmp_path / "d.jsonl"
    recs = [{"prompt_len": 3, "output_len": 1, "request_id": r} for r in ("a", "b", "a")]
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    _expect(path, ":3:", "'request_id'", "duplicate", "'a'")


def test_wrong_encoding(tmp_path: Path) -> None:
    """Latin-1 and UTF-16 files are rejected with the offending line."""
    path = tmp_path / "l.csv"
    path.write_bytes((HEADER + ROW1).encode() + "caf\xe9,1,1\n".encode("latin-1"))
    _expect(path, ":3:", "wrong encoding")
    path16 = tmp_path / "u.csv"
    path16.write_bytes((HEADER + ROW1).encode("utf-16"))
    _expect(path16, "wrong encoding")


def test_gzip_named_csv(tmp_path: Path) -> None:
    """A gzip file with a .csv name is reported as compressed, not parsed as text."""
    path = tmp_path / "z.csv"
    path.write_bytes(gzip.compress((HEADER + ROW1).encode()))
    _expect(path, "gzip-compressed")


def test_malformed_csv_row(tmp_path: Path) -> None:
    """A row with extra fields is reported with its line."""
    _expect(_csv(tmp_path, HEADER + ROW1 + "2023-11-16 18:17:04.0319600,3,8,9\n"),
            ":3:", "malformed CSV row", "saw 4")


def test_unknown_format(tmp_path: Path) -> None:
    """An unrecognisable header asks for --format or --columns (options that exist)."""
    _expect(_csv(tmp_path, "a,b\n1,2\n"), "cannot detect", "--format", "--columns NAME=COL")
    _expect(_csv(tmp_path, "a,b\n1,2\n", "x.csv"), "--format parquet: unknown",
            format="parquet")


def test_token_id_count_mismatch(tmp_path: Path) -> None:
    """Explicit token ids must match the stated prompt length."""
    path = tmp_path / "k.jsonl"
    path.write_text('{"input_toks": 3, "output_toks": 1, "arrival_time_ns": 0, '
                    '"input_tok_ids": [1, 2]}\n')
    _expect(path, ":1:", "'input_tok_ids'", "has 2 ids")


def test_missing_file(tmp_path: Path) -> None:
    """A path that does not exist is one clear error."""
    _expect(tmp_path / "nope.csv", "cannot read")


def _jsonl(tmp_path: Path, rows: list[dict[str, object]], name: str = "r.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("hash_ids", [[1], [1, 2, 3]])
def test_mooncake_hash_ids_must_match_input_length(tmp_path: Path, hash_ids: list[int]) -> None:
    """Fewer or more hash ids than ceil(input_length / 512) is an error naming the line."""
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [7, 8]},
            {"timestamp": 5, "input_length": 1000, "output_length": 1, "hash_ids": hash_ids}]
    path = _jsonl(tmp_path, rows)
    _expect(path, ":2:", "'hash_ids'", f"{len(hash_ids)} ids", "needs 2 blocks of 512",
            "--hash-block-size")
    other = _jsonl(tmp_path, [{"timestamp": 0, "input_length": 1000, "output_length": 1,
                               "hash_ids": [1]}], "k.jsonl")
    assert len(load_trace(other, hash_block_size=1000)) == 1


@pytest.mark.parametrize(("text", "name", "field"), [
    (HEADER + "2023-11-16 18:17:03.9799600,999999999999,10\n", "a.csv", "'ContextTokens'"),
    (HEADER + "2023-11-16 18:17:03.9799600,5,1e20\n", "b.csv", "'GeneratedTokens'"),
    (('{"timestamp": 0, "input_length": 99999999999999999999999, "output_length": 1, '
      '"hash_ids": [1]}\n'), "m.jsonl", "'input_length'"),
    ('{"input_toks": 3, "output_toks": 16777217, "arrival_time_ns": 0}\n', "t.jsonl",
     "'output_toks'"),
    ('[{"prompt_len": 123456789012, "output_len": 1}]', "v.json", "'prompt_len'"),
])
def test_counts_too_large_to_represent(tmp_path: Path, text: str, name: str,
                                       field: str) -> None:
    """Token counts over 2^24 (or beyond int64) are refused while loading, with the line."""
    path = tmp_path / name
    path.write_text(text)
    _expect(path, field, "too large", "16,777,216")


def test_generic_counts_and_span_limits(tmp_path: Path) -> None:
    """n / beam_width over 4,096 and arrivals spanning over 1e9 s name their column; the
    span error suggests --time-unit."""
    cmap = {"arrival": "t", "prompt_len": "p", "output_len": "o", "n": "k"}
    path = _csv(tmp_path, "t,p,o,k\n0,5,5,1\n1,5,5,5000\n")
    _expect(path, ":3:", "'k'", "too large", column_map=cmap)
    span = _csv(tmp_path, "t,p,o\n0,5,5\n1700000000000,5,5\n", "s.csv")
    cmap = {"arrival": "t", "prompt_len": "p", "output_len": "o"}
    _expect(span, ":3:", "'t'", "more than 1e+09 s", "--time-unit", column_map=cmap)
    assert load_trace(span, column_map=cmap, time_unit="us").metadata.span_s == 1.7e6


@pytest.mark.parametrize(("extra", "field", "words"), [
    ({"cache_salt": 5}, "'cache_salt'", "expected a string, got a number (5)"),
    ({"cache_salt": ""}, "'cache_salt'", "empty string"),
    ({"lora_name": ["a"]}, "'lora_name'", "expected a string, got a list"),
    ({"lora_name": True}, "'lora_name'", "got a boolean"),
    ({"priority": "high"}, "'priority'", "'high'"),
    ({"priority": 1.5}, "'priority'", "not an integer"),
    ({"priority": True}, "'priority'", "not a number"),
    ({"acceptance_rate": 1.5}, "'acceptance_rate'", "too large"),
    ({"acceptance_rate": -0.1}, "'acceptance_rate'", "negative"),
    ({"acceptance_rate": "high"}, "'acceptance_rate'", "'high'"),
])
def test_serving_field_types(tmp_path: Path, extra: dict[str, object], field: str,
                             words: str) -> None:
    """cache_salt / lora_name must be non-empty strings and priority an integer; the error
    names the line and field."""
    rows = [{"input_toks": 3, "output_toks": 2, "arrival_time_ns": 0},
            {"input_toks": 3, "output_toks": 2, "arrival_time_ns": 5, **extra}]
    _expect(_jsonl(tmp_path, rows), ":2:", field, words)
