"""Unit tests for traces.tokenizer: a local tokenizer.json built here with the `tokenizers`
package (never downloaded), the character estimate, and the one-line errors."""
from __future__ import annotations

import builtins
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from traces import TraceError
from traces.tokenizer import CharEstimate, encode_all, load_tokenizer

tokenizers = pytest.importorskip("tokenizers")
from tests.unit.tokenizer_kit import bpe, word_level


def test_word_level_from_file_and_directory(tmp_path: Path) -> None:
    """The file and its directory load the same tokenizer; one id per known word."""
    file = word_level(tmp_path / "wl")
    by_file, by_dir = load_tokenizer(file), load_tokenizer(file.parent)
    vocab = json.loads(file.read_text())["model"]["vocab"]
    assert by_file("the cat sat") == [vocab["the"], vocab["cat"], vocab["sat"]]
    assert by_dir("the cat sat") == by_file("the cat sat")
    assert by_file("zebra") == [vocab["[UNK]"]]
    assert by_file.vocab_size == len(vocab)
    assert str(file) in by_file.description


def test_bpe_batch_matches_single(tmp_path: Path) -> None:
    """encode_all batches through the tokenizer and agrees with one-at-a-time encoding."""
    tok = load_tokenizer(bpe(tmp_path / "bpe"))
    texts = ["the cat", "a dog ran far away", "mat"]
    batched = encode_all(tok, texts)
    assert [ids.tolist() for ids in batched] == [tok(t) for t in texts]
    assert len(batched[1]) > len(batched[2])


def test_missing_file_and_directory(tmp_path: Path) -> None:
    """A missing path or a directory without tokenizer.json is one line naming --tokenizer."""
    for path, words in ((tmp_path / "nope.json", "no such file"),
                        (tmp_path, "holds no tokenizer.json")):
        with pytest.raises(TraceError) as info:
            load_tokenizer(path)
        text = str(info.value)
        assert "--tokenizer" in text and words in text and "\n" not in text
        assert "nothing is downloaded" in text


def test_not_a_tokenizer(tmp_path: Path) -> None:
    """A JSON file that is not a tokenizer is refused with its path."""
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(TraceError, match="not a Hugging Face tokenizer.json"):
        load_tokenizer(bad)


def test_missing_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the tokenizers package the error names the extra to install."""
    file = word_level(tmp_path / "wl")
    real_import = builtins.__import__

    def no_tokenizers(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "tokenizers" or name.startswith("tokenizers."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tokenizers)
    with pytest.raises(TraceError) as info:
        load_tokenizer(file)
    assert 'pip install -e ".[tokenizer]"' in str(info.value)


def test_tokenizers_not_imported_without_a_tokenizer() -> None:
    """Loading traces and running datasets without --tokenizer never imports tokenizers."""
    code = ("import sys, traces; from traces.workload import WorkloadSpec, load_workload; "
            "load_workload(WorkloadSpec(dataset_name='random', num_prompts=3)); "
            "print('tokenizers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


def test_char_estimate_counts_and_ids() -> None:
    """One token per 4 characters, rounded up; equal leading text gives equal leading ids."""
    est = CharEstimate()
    assert [len(est(t)) for t in ("", "abcd", "abcde", "x" * 401)] == [0, 1, 2, 101]
    a, b = est("hello world, this"), est("hello world, that")
    assert a[:3].tolist() == b[:3].tolist() and a[3] != b[3]
    assert np.array_equal(est("same text"), est("same text"))
    assert 0 <= int(est("\u00e9t\u00e9 \u4e2d\u6587" * 50).max()) < est.vocab_size
