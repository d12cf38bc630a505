"""simulate.py's options in the spellings ``vllm bench serve`` users bring.

``add_convention_options`` adds the workload options of ``traces/options.py`` (--dataset-name,
--random-*, --num-prompts, --request-rate, --burstiness, --tokenizer, --sort, --columns,
--time-unit, ...), the client's --max-concurrency, the benchmark metrics' --goodput,
--percentile-metrics, --metric-percentiles and --json, and --list. ``HelpFormatter`` prints
each default once, and none for on/off switches. ``workload_spec`` gathers the workload
options of ``Options`` into the ``traces.WorkloadSpec`` that ``traces.load_workload`` reads.
"""
from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from sim.config import Options, WorkloadConfig
from traces.options import HelpFormatter as TraceHelpFormatter
from traces.options import add_trace_options, add_workload_options
from traces.workload import WorkloadSpec

_D = Options()
LIST_CHOICES = ("models", "gpus", "formats", "allocators")
_SWITCHES = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction)


class HelpFormatter(TraceHelpFormatter):
    """One "(default: X)" per option; none for a switch such as --no-fast, whose default is
    simply not being given (what it switches off is on by default)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if isinstance(action, _SWITCHES):
            return action.help
        return super()._get_help_string(action)


class _Tuple(argparse.Action):
    """nargs="+" stored as a tuple (``Options`` is frozen and hashable)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, tuple(values))


def add_convention_options(parser: argparse.ArgumentParser) -> None:
    """vllm bench serve's workload, client and metric options, and --list."""
    w = parser.add_argument_group("datasets and arrivals (as vllm bench serve)")
    add_trace_options(w, skip=("format",))
    add_workload_options(w, skip=("rate_scale", "limit", "seed"))
    w.add_argument("--max-concurrency", type=int, default=None, metavar="N",
                   help="most requests in flight from the client; a request is sent when it "
                        "arrives or when a slot frees, whichever is later, and its latencies "
                        "count from the send (default: no limit)")
    m = parser.add_argument_group("benchmark metrics (vLLM's names, in ms)")
    m.add_argument("--goodput", nargs="+", action=_Tuple, default=None, metavar="NAME:MS",
                   help="SLOs for goodput, e.g. ttft:500 tpot:50 e2el:2000 (ms)")
    m.add_argument("--percentile-metrics", default=_D.percentile_metrics,
                   help="metrics with mean/median/std/percentiles: ttft, tpot, itl, e2el")
    m.add_argument("--metric-percentiles", default=_D.metric_percentiles,
                   help="comma-separated percentiles, e.g. 50,90,99")
    m.add_argument("--json", default=None, metavar="FILE",
                   help="also write the benchmark metrics to FILE (vllm bench serve's "
                        "--save-result layout, one entry per allocator)")
    parser.add_argument("--list", choices=LIST_CHOICES, default=None,
                        help="print the presets of one kind with their key numbers and exit")


def workload_spec(options: Options) -> WorkloadSpec:
    """The workload options of ``options`` as a ``WorkloadSpec``."""
    names = {f.name for f in fields(Options)}
    values = {f.name: getattr(options, f.name) for f in fields(WorkloadSpec) if f.name in names}
    return WorkloadSpec(**values)


def describe_source(workload: WorkloadConfig) -> str:
    """What the requests are, for the resolved-configuration lines."""
    spec = workload.spec
    if spec is not None and spec.dataset_name not in (None, "default"):
        path = f" {spec.dataset_path}" if spec.dataset_path else ""
        return f"{spec.dataset_name} dataset{path}"
    return workload.trace or "built-in default workload"


def describe_arrivals(workload: WorkloadConfig) -> str | None:
    """The arrival schedule and client limit when vLLM's options set them, else None."""
    spec, parts = workload.spec, []
    if spec is not None and spec.request_rate is not None:
        parts.append(f"request rate {spec.request_rate:g}/s, burstiness {spec.burstiness:g}")
    if workload.max_concurrency is not None:
        parts.append(f"max concurrency {workload.max_concurrency} (latencies from the send)")
    return "  arrivals: " + ", ".join(parts) if parts else None

