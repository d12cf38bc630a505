"""Command line: `python -m traces summary [FILE] [options]` and `python -m traces fetch NAME`.

`summary` reads a trace file, a vLLM-style dataset (--dataset-name) or the default workload
with the same workload options simulate.py takes (traces/options.py) and prints its counts,
rates, lengths and ideal prefix reuse. Bad input prints one line to stderr and exits with
status 2, like argparse itself.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from traces.errors import TraceError
from traces.fetch import SOURCES, cache_dir, fetch
from traces.options import HelpFormatter, add_trace_options, add_workload_options, spec_from_args
from traces.summary import summarize
from traces.workload import load_workload


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m traces", description=__doc__,
                     formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    summ = sub.add_parser("summary", help="print counts, rates, lengths, prefix reuse",
                          description="Summarise a trace file, a vLLM-style dataset or the "
                                      "default workload, after the same options simulate.py "
                                      "applies.",
                          formatter_class=HelpFormatter)
    summ.add_argument("file", nargs="?", default=None,
                      help="trace file (omitted: --dataset-name, else the default workload)")
    add_trace_options(summ)
    add_workload_options(summ)
    summ.add_argument("--block-size", type=int, default=16, help="block size for prefix reuse")
    summ.add_argument("--json", action="store_true", help="print JSON instead of text")
    get = sub.add_parser("fetch", help="download a public trace and check its sha256",
                         formatter_class=HelpFormatter)
    get.add_argument("name", choices=sorted(SOURCES))
    get.add_argument("--dest", default=str(cache_dir()), help="directory to save into")
    get.add_argument("--url", default=None, help="download from this address instead")
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors; a TraceError from an option's type is one too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def option_names() -> set[str]:
    """Every option `python -m traces` accepts (messages may name only these)."""
    parser = _parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag for sub in subs.choices.values() for action in sub._actions
            for flag in action.option_strings}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    return str(value)


def render(summary: dict[str, Any]) -> str:
    """Human-readable summary, one `key: value` per line."""
    lines: list[str] = []
    for key, value in summary.items():
        if key == "notes":
            lines.extend(f"note: {note}" for note in value)
        else:
            lines.append(f"{key}: {_fmt(value)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "fetch":
            print(fetch(args.name, args.dest, args.url))
            return 0
        trace = load_workload(spec_from_args(args))
        summary = summarize(trace, block_size=args.block_size)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0
