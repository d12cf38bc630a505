"""Command-line options for workloads, shared by `python -m traces` and simulate.py.

`add_trace_options` adds how to read a trace file (--format, --sort, --columns,
--time-unit, --tokenizer, --hash-block-size); `add_workload_options` adds vllm bench serve's
dataset and arrival options (--dataset-name, --dataset-path, --num-prompts, --random-*,
--sonnet-*, --sharegpt-output-len, --request-rate, --burstiness) and, unless skipped,
--rate-scale, --limit and --seed. `spec_from_args` turns the parsed namespace into a
`WorkloadSpec` for `load_workload`. Option names in loader messages are these.
"""
from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Collection
from typing import Any

from traces.errors import TraceError
from traces.loader import FORMATS
from traces.workload import DATASET_NAMES, WorkloadSpec

TIME_UNITS = ("s", "ms", "us", "ns", "datetime")
COLUMN_FIELDS = "arrival, prompt_len, output_len, request_id, session_id, turn, n, ..."


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds "(default: X)" to an option's help unless the help already says its default,
    or the default is None (nothing given) or False (an off switch)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or any(action.default is v for v in (None, False,
                                                                   argparse.SUPPRESS)):
            return text
        return super()._get_help_string(action)


def parse_columns(text: str | None) -> dict[str, str] | None:
    """`--columns NAME=COL,...` as {field: column}; None stays None.

    Raises:
        TraceError: an item that is not NAME=COL.
    """
    if text is None:
        return None
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    if not pairs or any(len(p) != 2 or not p[0].strip() or not p[1].strip() for p in pairs):
        raise TraceError(f"--columns: expected NAME=COL pairs separated by commas (e.g. "
                         f"arrival=ts,prompt_len=in,output_len=out), got {text!r}")
    return {k.strip(): v.strip() for k, v in pairs}


def _columns_arg(text: str) -> dict[str, str] | None:
    """parse_columns as an argparse type (its error becomes argparse's one line)."""
    try:
        return parse_columns(text)
    except TraceError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--columns: ")) from None


def parse_rate(text: str) -> float:
    """A request rate in requests/s: a positive number or inf (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or inf, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (or inf), got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_trace_options(parser: Any, *, skip: Collection[str] = ()) -> None:
    """Options for reading a trace file; `skip` lists dests the caller already defines."""
    table: list[tuple[str, dict[str, Any]]] = [
        ("--format", {"choices": FORMATS, "default": None,
                      "help": "trace format (default: detected from the content)"}),
        ("--sort", {"action": "store_true",
                    "help": "sort rows by arrival time instead of refusing unsorted ones"}),
        ("--columns", {"type": _columns_arg, "default": None, "metavar": "NAME=COL,...",
                       "help": f"column of each field in a generic CSV/JSONL ({COLUMN_FIELDS})"}),
        ("--time-unit", {"choices": TIME_UNITS, "default": None,
                         "help": "unit of a generic arrival column (default: s, or datetime "
                                 "for timestamps)"}),
        ("--tokenizer", {"default": None, "metavar": "PATH",
                         "help": "local tokenizer.json (or its directory) to count ShareGPT / "
                                 "sonnet tokens; needs pip install -e \".[tokenizer]\"; "
                                 "never downloads (default: 4 characters per token)"}),
        ("--hash-block-size", {"type": _positive_int, "default": 512,
                               "help": "tokens per Mooncake hash id"}),
    ]
    _add(parser, table, skip)


def add_workload_options(parser: Any, *, skip: Collection[str] = ()) -> None:
    """vllm bench serve's dataset and arrival options (plus --rate-scale, --limit, --seed)."""
    table: list[tuple[str, dict[str, Any]]] = [
        ("--dataset-name", {"choices": DATASET_NAMES, "default": None,
                            "help": "workload source (default: the trace file if given, "
                                    "else the built-in default workload)"}),
        ("--dataset-path", {"default": None, "metavar": "FILE",
                            "help": "ShareGPT JSON, sonnet text or BurstGPT CSV file"}),
        ("--num-prompts", {"type": _positive_int, "default": None, "metavar": "N",
                           "help": "requests to generate or sample (datasets: default 1000); "
                                   "on a trace the first N, like --limit"}),
        ("--random-input-len", {"type": int, "default": 1024, "help": "random: input tokens"}),
        ("--random-output-len", {"type": int, "default": 128, "help": "random: output tokens"}),
        ("--random-range-ratio", {"type": float, "default": 0.0,
                                  "help": "random: lengths uniform in len x [1 - r, 1 + r]"}),
        ("--random-prefix-len", {"type": int, "default": 0,
                                 "help": "random: tokens of a prefix shared by every prompt"}),
        ("--sonnet-input-len", {"type": int, "default": 550, "help": "sonnet: input tokens"}),
        ("--sonnet-output-len", {"type": int, "default": 150, "help": "sonnet: output tokens"}),
        ("--sonnet-prefix-len", {"type": int, "default": 200,
                                 "help": "sonnet: tokens of the shared leading lines"}),
        ("--sharegpt-output-len", {"type": _positive_int, "default": None,
                                   "help": "sharegpt: fixed output tokens (default: the "
                                           "completion's)"}),
        ("--request-rate", {"type": parse_rate, "default": None, "metavar": "RATE",
                            "help": "requests/s; replaces the trace's arrival times (inf: all "
                                    "at time 0; default: the trace's own times, datasets inf)"}),
        ("--burstiness", {"type": float, "default": 1.0,
                          "help": "gamma shape of the --request-rate gaps (1: Poisson)"}),
        ("--rate-scale", {"type": float, "default": 1.0,
                          "help": "replay the trace's own times at X times their rate"}),
        ("--limit", {"type": _positive_int, "default": None, "metavar": "N",
                     "help": "first N requests only"}),
        ("--seed", {"type": int, "default": 0, "help": "seed for datasets, arrivals, token ids"}),
    ]
    _add(parser, table, skip)


def _add(parser: Any, table: list[tuple[str, dict[str, Any]]], skip: Collection[str]) -> None:
    for flag, kwargs in table:
        if flag[2:].replace("-", "_") not in skip:
            parser.add_argument(flag, **kwargs)


def spec_from_args(args: argparse.Namespace) -> WorkloadSpec:
    """A WorkloadSpec from parsed options (missing attributes keep the spec's defaults);
    the trace file is `args.trace`, or `args.file` for `python -m traces`."""
    values = vars(args)
    fields = {f.name: values[f.name] for f in dataclasses.fields(WorkloadSpec)
              if f.name in values}
    if "trace" not in fields and "file" in values:
        fields["trace"] = values["file"]
    return WorkloadSpec(**fields)
