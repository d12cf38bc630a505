"""Unit tests for traces.sharegpt: vLLM's ShareGPT sampling (shuffle, length filter,
oversampling), token counts from a local tokenizer or the flagged character estimate."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from traces import TraceError, load_trace, summarize
from traces.sharegpt import sharegpt_dataset


def words(count: int, word: str = "cat") -> str:
    return " ".join([word] * count)


def conv(cid: str, prompt: str, reply: str, *more: str) -> dict[str, Any]:
    turns = [{"from": "human", "value": prompt}, {"from": "gpt", "value": reply}]
    turns += [{"from": "human", "value": m} for m in more]
    return {"id": cid, "conversations": turns}


def write(tmp_path: Path, records: list[Any], name: str = "sg.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def word_count(text: str) -> list[int]:
    return [len(w) for w in text.split()]


def test_sampling_follows_vllm_shuffle_and_filter(tmp_path: Path) -> None:
    """Records are shuffled with Python's random(seed), then kept while they pass vLLM's
    length filter (prompt 4..1024, completion >= 4, total <= 2048), up to num_prompts."""
    records = [conv(f"c{k}", words(5 + k), words(6 + k)) for k in range(30)]
    records += [conv("short", words(3), words(9)), conv("long", words(1100), words(5)),
                conv("tiny-reply", words(9), words(2)), conv("total", words(1000), words(1049)),
                {"id": "one-turn", "conversations": [{"from": "human", "value": words(9)}]}]
    path = write(tmp_path, records)
    trace = sharegpt_dataset(path, 12, tokenizer=word_count, seed=3)
    eligible = [r for r in records if len(r["conversations"]) >= 2]
    random.Random(3).shuffle(eligible)
    expected = [r["id"] for r in eligible if r["id"].startswith("c")][:12]
    got = [records[line - 1]["id"] for line in trace.lines.tolist()]
    assert got == expected
    assert list(trace.request_ids) == [str(k) for k in range(12)]
    first = records[trace.lines[0] - 1]["conversations"]
    assert trace[0].prompt_len == len(first[0]["value"].split())
    assert trace[0].output_len == len(first[1]["value"].split())
    assert trace.prompt_token_ids(0).tolist() == [3] * trace[0].prompt_len
    assert trace.metadata.format == "sharegpt" and not trace.metadata.tokens_estimated


def test_fixed_output_len_and_no_shuffle(tmp_path: Path) -> None:
    """--sharegpt-output-len fixes every output and lifts the completion minimum."""
    records = [conv("a", words(5), words(1)), conv("b", words(6), words(2))]
    trace = sharegpt_dataset(write(tmp_path, records), 2, tokenizer=word_count,
                             output_len=77, shuffle=False)
    assert trace.output_lens.tolist() == [77, 77] and trace.prompt_lens.tolist() == [5, 6]


def test_oversampling_repeats_to_num_prompts(tmp_path: Path) -> None:
    """Fewer qualifying records than num_prompts: accepted ones repeat, ids stay unique."""
    records = [conv("a", words(5), words(6)), conv("b", words(7), words(8))]
    trace = sharegpt_dataset(write(tmp_path, records), 9, tokenizer=word_count, seed=1)
    assert len(trace) == 9 and len(set(trace.request_ids.tolist())) == 9
    assert set(trace.prompt_lens.tolist()) == {5, 7}
    assert any("7 repeated to reach 9" in n for n in trace.metadata.notes)


def test_estimate_is_flagged_in_summary(tmp_path: Path) -> None:
    """Without a tokenizer, counts are 4 characters per token and the summary says so."""
    records = [conv("a", "x" * 40, "y" * 22)]
    trace = sharegpt_dataset(write(tmp_path, records), 1)
    assert trace[0].prompt_len == 10 and trace[0].output_len == 6
    summary = summarize(trace)
    assert summary["tokens_estimated"] is True
    assert "4 characters per token" in summary["tokenizer"]
    assert any("token counts: estimated" in n for n in summary["notes"])


def test_trace_format_keeps_file_order(tmp_path: Path) -> None:
    """As a trace (load_trace), every usable record is kept in file order, unfiltered."""
    records = [conv("b", words(2), words(1)), conv("a", words(3000), words(2), "more")]
    trace = load_trace(write(tmp_path, records), tokenizer=word_count)
    assert list(trace.request_ids) == ["b", "a"] and trace.prompt_lens.tolist() == [2, 3000]


def test_real_tokenizer_counts(tmp_path: Path) -> None:
    """A local tokenizer.json counts the tokens (here one per known word)."""
    pytest.importorskip("tokenizers")
    from tests.unit.tokenizer_kit import word_level
    from traces.tokenizer import load_tokenizer

    tok = load_tokenizer(word_level(tmp_path / "tok"))
    records = [conv("a", "the cat sat on the mat", "a dog ran far")]
    trace = sharegpt_dataset(write(tmp_path, records), 1, tokenizer=tok)
    assert trace[0].prompt_len == 6 and trace[0].output_len == 4
    assert trace.prompt_token_ids(0).tolist() == tok("the cat sat on the mat")
    assert str(tmp_path / "tok") in str(trace.metadata.tokenizer)


@pytest.mark.parametrize(("doc", "words_"), [
    ({"conversations": []}, "expected a JSON array"),
    ([conv("a", words(2), words(9))], "no conversation qualifies"),
    ([{"id": 1}], "no conversation qualifies"),
])
def test_bad_files(tmp_path: Path, doc: Any, words_: str) -> None:
    """Not an array, or no qualifying record: one line naming the file."""
    path = write(tmp_path, doc)
    with pytest.raises(TraceError) as info:
        sharegpt_dataset(path, 5, tokenizer=word_count)
    assert words_ in str(info.value) and str(path) in str(info.value)


def test_bad_arguments(tmp_path: Path) -> None:
    """num_prompts and output_len below 1 are refused, naming the options."""
    path = write(tmp_path, [conv("a", words(5), words(6))])
    with pytest.raises(TraceError, match="--num-prompts"):
        sharegpt_dataset(path, 0)
    with pytest.raises(TraceError, match="--sharegpt-output-len"):
        sharegpt_dataset(path, 1, output_len=0)
