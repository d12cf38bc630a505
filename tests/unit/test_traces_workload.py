"""Unit tests for traces.workload and traces.options: one workload from command-line
choices (trace, dataset or default; counts; arrival times), and the conflicts refused."""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest

from traces import TraceError, default_workload
from traces.options import (
    HelpFormatter,
    add_trace_options,
    add_workload_options,
    parse_columns,
    spec_from_args,
)
from traces.workload import WorkloadSpec, load_workload

DATA = Path(__file__).resolve().parents[1] / "data"


def parse(*argv: str) -> WorkloadSpec:
    parser = argparse.ArgumentParser(formatter_class=HelpFormatter)
    parser.add_argument("trace", nargs="?", default=None)
    add_trace_options(parser)
    add_workload_options(parser)
    return spec_from_args(parser.parse_args(list(argv)))


def test_default_and_trace_sources() -> None:
    """No source: the default workload; a path: that trace; --num-prompts takes the first N."""
    assert len(load_workload(parse())) == len(default_workload())
    tiny = load_workload(parse(str(DATA / "tiny_azure.csv"), "--num-prompts", "3"))
    assert len(tiny) == 3 and tiny.metadata.format.startswith("azure")
    assert len(load_workload(parse("--limit", "7"))) == 7


def test_random_dataset_at_a_request_rate() -> None:
    """--dataset-name random with vLLM's options, spread by --request-rate / --burstiness."""
    t = load_workload(parse("--dataset-name", "random", "--num-prompts", "50",
                            "--random-input-len", "64", "--random-output-len", "8",
                            "--random-prefix-len", "16", "--request-rate", "10",
                            "--burstiness", "2", "--seed", "4"))
    assert len(t) == 50 and set(t.prompt_lens.tolist()) == {80}
    assert t.arrival_s[-1] == pytest.approx(5.0)
    unbounded = load_workload(parse("--dataset-name", "random", "--num-prompts", "5",
                                    "--request-rate", "inf"))
    assert np.all(unbounded.arrival_s == 0)


def test_request_rate_replaces_a_traces_times() -> None:
    """On a trace, --request-rate is a replay at a fixed rate: order kept, times replaced."""
    path = str(DATA / "tiny_azure.csv")
    own = load_workload(parse(path))
    fixed = load_workload(parse(path, "--request-rate", "100", "--burstiness", "inf"))
    assert fixed.request_ids.tolist() == own.request_ids.tolist()
    assert np.diff(fixed.arrival_s) == pytest.approx(np.full(len(own) - 1, 0.01))
    scaled = load_workload(parse(path, "--rate-scale", "2"))
    assert scaled.arrival_s == pytest.approx(own.arrival_s / 2)


def test_sonnet_and_sharegpt_need_a_file(tmp_path: Path) -> None:
    """File datasets read --dataset-path (or the trace argument)."""
    text = tmp_path / "poem.txt"
    text.write_text("".join(f"verse {k} of the poem goes here\n" for k in range(30)))
    t = load_workload(parse("--dataset-name", "sonnet", "--dataset-path", str(text),
                            "--num-prompts", "4", "--sonnet-input-len", "60",
                            "--sonnet-prefix-len", "30"))
    assert len(t) == 4 and t.metadata.format == "sonnet"
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps([{"id": "a", "conversations": [
        {"from": "human", "value": "tell me a long story please"},
        {"from": "gpt", "value": "once upon a time there was"}]}]))
    t2 = load_workload(parse(str(sg), "--dataset-name", "sharegpt", "--num-prompts", "2"))
    assert len(t2) == 2 and t2.metadata.tokens_estimated


def test_burstgpt_dataset_reads_the_csv(tmp_path: Path) -> None:
    """--dataset-name burstgpt replays the CSV's rows (failed ones skipped)."""
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,472,18,490,Conversation log\n"
                    "6,GPT-4,10,0,10,Conversation log\n9,GPT-4,30,4,34,API log\n")
    t = load_workload(parse("--dataset-name", "burstgpt", "--dataset-path", str(path)))
    assert t.prompt_lens.tolist() == [472, 30] and t.arrival_s.tolist() == [0.0, 4.0]


@pytest.mark.parametrize(("argv", "words"), [
    (("--request-rate", "5", "--rate-scale", "2"), "--request-rate and --rate-scale"),
    (("--burstiness", "2"), "--burstiness shapes the --request-rate schedule"),
    (("--num-prompts", "3", "--limit", "4"), "--num-prompts and --limit"),
    (("--dataset-name", "sharegpt"), "--dataset-name sharegpt needs a file"),
    (("--dataset-name", "random", "--dataset-path", "x.json"), "reads no file"),
    (("--format", "csv"), "--format applies to a trace file"),
    (("--sort",), "--sort applies to a trace file"),
    (("--dataset-name", "random", "--time-unit", "ms"), "--time-unit applies"),
    (("--rate-scale", "1e-300"), "--rate-scale 1e-300"),
    (("--request-rate", "1e-300"), "--request-rate 1e-300"),
    (("--dataset-name", "random", "--random-range-ratio", "2"), "--random-range-ratio 2"),
])
def test_conflicts_and_absurd_values(argv: tuple[str, ...], words: str) -> None:
    """Contradictory or absurd choices are one TraceError line naming the option."""
    with pytest.raises(TraceError) as info:
        load_workload(parse(*argv))
    assert words in str(info.value) and "\n" not in str(info.value)


def test_tokenizer_on_a_trace_with_counts(tmp_path: Path) -> None:
    """--tokenizer on a trace that gives token counts itself is refused (it would be unused)."""
    pytest.importorskip("tokenizers")
    from tests.unit.tokenizer_kit import word_level

    tok = word_level(tmp_path / "tok")
    with pytest.raises(TraceError, match="gives token counts itself"):
        load_workload(parse(str(DATA / "tiny_azure.csv"), "--tokenizer", str(tok)))


def test_parse_columns_and_rate() -> None:
    """--columns NAME=COL,... parses to a mapping; malformed text names --columns."""
    assert parse_columns("arrival=t, prompt_len=in,output_len=out") == {
        "arrival": "t", "prompt_len": "in", "output_len": "out"}
    for bad in ("arrival", "=x", "a=", ","):
        with pytest.raises(TraceError, match="--columns"):
            parse_columns(bad)
    assert parse("--request-rate", "inf").request_rate == math.inf
    with pytest.raises(SystemExit):
        parse("--request-rate", "0")


def test_help_shows_each_default_once() -> None:
    """The help formatter never doubles "(default: ...)" and hides None/False defaults."""
    parser = argparse.ArgumentParser(formatter_class=HelpFormatter)
    add_trace_options(parser)
    add_workload_options(parser)
    text = " ".join(parser.format_help().split())
    assert "(default: 1024)" in text and "(default: 0.0)" in text
    assert "(default: None)" not in text and "(default: False)" not in text
    assert text.count("(default: detected from the content)") == 1
    assert "detected from the content) (default" not in text


def test_skip_leaves_callers_options() -> None:
    """A caller that already defines --seed or --format can skip them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--format")
    add_trace_options(parser, skip={"format"})
    add_workload_options(parser, skip={"seed"})
    args = parser.parse_args(["--seed", "3", "--num-prompts", "2"])
    assert spec_from_args(args).seed == 3 and spec_from_args(args).num_prompts == 2
