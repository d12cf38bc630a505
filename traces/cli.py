"""Command line: `python -m traces summary FILE` and `python -m traces fetch NAME`.

Bad input prints one line to stderr and exits with status 2, like argparse itself.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from traces.errors import TraceError
from traces.fetch import SOURCES, cache_dir, fetch
from traces.loader import FORMATS, load_trace
from traces.summary import summarize


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m traces", description=__doc__,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    summ = sub.add_parser("summary", help="print counts, rates, lengths, prefix reuse",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    summ.add_argument("file")
    summ.add_argument("--format", choices=FORMATS, default=None,
                      help="trace format (default: detect from content)")
    summ.add_argument("--sort", action="store_true", help="sort out-of-order timestamps")
    summ.add_argument("--columns", default=None,
                      help="generic column map, e.g. arrival=ts,prompt_len=in,output_len=out")
    summ.add_argument("--time-unit", default=None,
                      choices=["s", "ms", "us", "ns", "datetime"],
                      help="unit of a generic arrival column (default: s, or datetime)")
    summ.add_argument("--block-size", type=int, default=16, help="block size for prefix reuse")
    summ.add_argument("--json", action="store_true", help="print JSON instead of text")
    get = sub.add_parser("fetch", help="download a public trace and check its sha256",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    get.add_argument("name", choices=sorted(SOURCES))
    get.add_argument("--dest", default=str(cache_dir()), help="directory to save into")
    get.add_argument("--url", default=None, help="download from this address instead")
    return parser


def _column_map(text: str | None) -> dict[str, str] | None:
    if text is None:
        return None
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    if any(len(p) != 2 or not p[0].strip() or not p[1].strip() for p in pairs):
        raise TraceError(f"--columns: expected field=column pairs, got {text!r}")
    return {k.strip(): v.strip() for k, v in pairs}


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
    args = _parser().parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch(args.name, args.dest, args.url))
            return 0
        trace = load_trace(args.file, args.format, sort=args.sort,
                           column_map=_column_map(args.columns), time_unit=args.time_unit)
        summary = summarize(trace, block_size=args.block_size)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0
