"""Unit tests for traces.datasets: vLLM's random dataset (uniform lengths around the means,
a shared random prefix) and the sonnet dataset (instruction, shared lines, drawn lines)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from traces import TraceError, summarize
from traces.datasets import SONNET_INSTRUCTION, length_bounds, random_dataset, sonnet_dataset
from traces.tokenizer import CharEstimate


def test_random_lengths_follow_vllm_bounds() -> None:
    """Own prompt lengths are uniform on [floor(L(1-r)), ceil(L(1+r))], outputs likewise."""
    t = random_dataset(5000, input_len=101, output_len=7, range_ratio=0.5, seed=1)
    assert length_bounds(101, 0.5) == (50, 152) and length_bounds(7, 0.5, least=1) == (3, 11)
    assert t.prompt_lens.min() == 50 and t.prompt_lens.max() == 152
    assert t.output_lens.min() == 3 and t.output_lens.max() == 11
    assert t.prompt_lens.mean() == pytest.approx(101, rel=0.02)
    assert np.all(t.arrival_s == 0) and t.metadata.format == "random"


def test_random_defaults_and_fixed_lengths() -> None:
    """vLLM's defaults: 1,000 prompts of 1,024 tokens, 128 output tokens, range 0."""
    t = random_dataset()
    assert len(t) == 1000 and set(t.prompt_lens.tolist()) == {1024}
    assert set(t.output_lens.tolist()) == {128}
    assert summarize(t)["prefix_reuse"]["reused_tokens"] == 0


def test_random_prefix_is_shared_by_every_prompt() -> None:
    """prefix_len tokens open every prompt, identical across requests; the rest differ."""
    t = random_dataset(20, input_len=40, output_len=4, prefix_len=32, seed=5)
    ids = [t.prompt_token_ids(i) for i in range(len(t))]
    assert all(len(x) == 72 for x in ids)
    assert all(np.array_equal(x[:32], ids[0][:32]) for x in ids)
    assert not np.array_equal(ids[0][32:], ids[1][32:])
    reuse = summarize(t)["prefix_reuse"]
    assert reuse["reused_tokens"] == 19 * 32      # block size 16: two blocks per later request


def test_random_prefix_only_prompts() -> None:
    """input_len 0 with a prefix: every prompt is exactly the prefix."""
    t = random_dataset(3, input_len=0, output_len=2, prefix_len=5)
    assert t.prompt_lens.tolist() == [5, 5, 5]
    assert np.array_equal(t.prompt_token_ids(0), t.prompt_token_ids(2))


@pytest.mark.parametrize(("kwargs", "option"), [
    ({"range_ratio": 1.0}, "--random-range-ratio"),
    ({"range_ratio": -0.1}, "--random-range-ratio"),
    ({"input_len": -1}, "--random-input-len"),
    ({"output_len": 0}, "--random-output-len"),
    ({"prefix_len": -3}, "--random-prefix-len"),
    ({"num_prompts": 0}, "--num-prompts"),
    ({"input_len": 1, "range_ratio": 0.5}, "--random-input-len"),
    ({"input_len": 2**25}, "--random-input-len"),
])
def test_random_bad_arguments(kwargs: dict[str, float], option: str) -> None:
    """Each bad argument is refused by its vllm bench serve option name."""
    with pytest.raises(TraceError) as info:
        random_dataset(**kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(option)


def sonnet_file(tmp_path: Path) -> Path:
    lines = [f"Line {k} of a poem that goes on for a while\n" for k in range(40)]
    path = tmp_path / "sonnet.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_sonnet_prompts_share_the_leading_lines(tmp_path: Path) -> None:
    """Every prompt opens with the instruction and the file's first lines, stays within
    input_len, and has output_len output tokens."""
    path = sonnet_file(tmp_path)
    t = sonnet_dataset(path, 30, input_len=120, output_len=9, prefix_len=60, seed=2)
    est = CharEstimate()
    line = len("Line 10 of a poem that goes on for a while\n")
    num_prefix = round((60 - len(est(SONNET_INSTRUCTION))) / (line / 4))
    shared = len(est(SONNET_INSTRUCTION + "".join(
        path.read_text().splitlines(keepends=True)[:num_prefix]))) - 1
    ids = [t.prompt_token_ids(i) for i in range(len(t))]
    assert all(np.array_equal(x[:shared], ids[0][:shared]) for x in ids)
    assert len({x[shared + 2:].tobytes() for x in ids}) > 1
    assert t.prompt_lens.max() <= 120 and set(t.output_lens.tolist()) == {9}
    assert t.metadata.tokens_estimated and t.metadata.format == "sonnet"
    assert math.isclose(t.prompt_lens.mean(), 120, rel_tol=0.25)


def test_sonnet_bad_input(tmp_path: Path) -> None:
    """Empty files, input_len not above the instruction, or unmeetable lengths are one line."""
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n \n")
    with pytest.raises(TraceError, match="empty file"):
        sonnet_dataset(empty)
    with pytest.raises(TraceError, match="--sonnet-input-len 5: must exceed"):
        sonnet_dataset(sonnet_file(tmp_path), input_len=5)
    with pytest.raises(TraceError, match="raise it or lower --sonnet-prefix-len"):
        sonnet_dataset(sonnet_file(tmp_path), 3, input_len=100, prefix_len=300)
