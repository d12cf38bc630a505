"""Benchmark metrics under ``vllm bench serve``'s names and definitions, in milliseconds.

From the finished requests of one allocator: ``completed``; ``request_throughput``,
``output_throughput`` and ``total_token_throughput`` (prompt + output tokens) over
``duration`` (s, last finish - first arrival, as ``duration_s``); for each of
``--percentile-metrics`` (ttft, tpot, itl, e2el) ``mean_/median_/std_X_ms`` and
``pN_X_ms`` for each of ``--metric-percentiles`` (N as vLLM writes it: 99, 99.9). TTFT is
first token - send; TPOT (e2el - ttft) / (output - 1) over requests with output > 1; ITL
pools every gap between two output tokens of a request (see ``token_gaps``); goodput is the
number of requests meeting every ``--goodput`` SLO per second (TPOT counts as 0 for one
output token, as vLLM does). numpy's mean, median, std (population) and linear percentile.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from sim.config import OptionError, Options

METRICS = ("ttft", "tpot", "itl", "e2el")
SLO_METRICS = ("ttft", "tpot", "e2el")


def parse_percentile_metrics(text: str) -> tuple[str, ...]:
    """``--percentile-metrics`` as names; refuses unknown ones."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in METRICS]
    if not names or bad:
        raise OptionError("percentile_metrics", f"--percentile-metrics {text!r}: choose "
                                                f"from {', '.join(METRICS)} (comma-separated)")
    return names


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``--metric-percentiles`` as numbers in (0, 100]."""
    try:
        values = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        values = ()
    if not values or not all(0 < p <= 100 for p in values):
        raise OptionError("metric_percentiles", f"--metric-percentiles {text!r}: expected "
                                                "numbers in (0, 100], e.g. 50,90,99")
    return values


def parse_goodput(items: tuple[str, ...] | None) -> dict[str, float]:
    """``--goodput NAME:MS ...`` as {metric: SLO in ms}."""
    slos: dict[str, float] = {}
    for item in items or ():
        name, _, value = item.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if name not in SLO_METRICS or not ms >= 0 or name in slos:
            raise OptionError("goodput", f"--goodput {item!r}: expected NAME:MS with NAME one "
                                         f"of {', '.join(SLO_METRICS)}, each once, MS >= 0")
        slos[name] = ms
    return slos


def check_bench_options(options: Options) -> None:
    """Refuse bad --percentile-metrics, --metric-percentiles, --goodput or a --json FILE
    that could not be written (OptionError), before anything is simulated."""
    parse_percentile_metrics(options.percentile_metrics)
    parse_percentiles(options.metric_percentiles)
    parse_goodput(options.goodput)
    if options.json is not None:
        check_writable(Path(options.json))


def check_writable(path: Path) -> None:
    """Refuse a --json FILE that is a directory, or whose nearest existing parent is a
    file or not writable."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if path.is_dir():
        problem = "is a directory"
    elif not parent.is_dir():
        problem = f"{parent} is not a directory"
    elif not os.access(parent, os.W_OK | os.X_OK):
        problem = f"{parent} is not writable"
    else:
        return
    raise OptionError("json", f"--json {path}: {problem}; give a file path that can be written")


def percentile_word(p: float) -> str:
    """vLLM's spelling of a percentile in a key: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def token_gaps(first: np.ndarray, finish: np.ndarray, output: np.ndarray,
               step_end: np.ndarray) -> tuple[np.ndarray, int]:
    """Every gap between two output tokens of the requests, and how many were estimated.

    A token leaves at the end of a step, and a running request gains one token per step, so
    a request whose first token and finish bound exactly output - 1 steps has the gaps between
    those steps' ends. A request that sat out steps (preempted, or a contiguous baseline's
    batching) is not told apart by the step records: its output - 1 gaps are taken as equal,
    which keeps their sum (finish - first token) and the pooled mean exact.
    """
    lo = np.searchsorted(step_end, first, side="right")
    hi = np.searchsorted(step_end, finish, side="right")
    diffs = np.diff(step_end, prepend=step_end[:1])
    parts: list[np.ndarray] = []
    estimated = 0
    for a, b, f, e, n in zip(lo.tolist(), hi.tolist(), first.tolist(), finish.tolist(),
                             output.tolist()):
        if n < 2:
            continue
        if b - a == n - 1 and a >= 1 and step_end[a - 1] == f:
            parts.append(diffs[a:b])
        else:
            estimated += 1
            parts.append(np.full(n - 1, (e - f) / (n - 1)))
    return (np.concatenate(parts) if parts else np.zeros(0)), estimated


def _stats(name: str, values: np.ndarray, percentiles: tuple[float, ...]) -> dict[str, Any]:
    ms = values * 1000.0
    empty = not len(ms)
    out: dict[str, Any] = {
        f"mean_{name}_ms": None if empty else float(np.mean(ms)),
        f"median_{name}_ms": None if empty else float(np.median(ms)),
        f"std_{name}_ms": None if empty else float(np.std(ms)),
    }
    for p in percentiles:
        out[f"p{percentile_word(p)}_{name}_ms"] = None if empty else float(np.percentile(ms, p))
    return out


def bench_metrics(req: dict[str, list[Any]], step_end: np.ndarray,
                  options: Options) -> dict[str, Any]:
    """vllm bench serve's metrics of one allocator's requests (requests.parquet columns) and
    step end times (time_s + duration_s, in order)."""
    done = np.array([s == "finished" for s in req["status"]], dtype=bool)
    arrival = np.array(req["arrival_s"], dtype=np.float64)
    first = np.array([t for t, d in zip(req["first_token_s"], done) if d], dtype=np.float64)
    finish = np.array([t for t, d in zip(req["finish_s"], done) if d], dtype=np.float64)
    output = np.array(req["output_tokens"], dtype=np.int64)[done]
    prompt = np.array(req["prompt_tokens"], dtype=np.int64)[done]
    sent = arrival[done]
    ttft, e2el = first - sent, finish - sent
    multi = output > 1
    tpot_all = np.where(multi, (e2el - ttft) / np.maximum(output - 1, 1), 0.0)
    itl, estimated = token_gaps(first, finish, output, step_end)
    values = {"ttft": ttft, "tpot": tpot_all[multi], "itl": itl, "e2el": e2el}
    duration = float(finish.max() - arrival.min()) if done.any() else None
    completed = int(done.sum())

    def per_s(count: float) -> float | None:
        return count / duration if duration else None
    out: dict[str, Any] = {
        "duration": duration, "completed": completed,
        "total_input_tokens": int(prompt.sum()), "total_output_tokens": int(output.sum()),
        "request_throughput": per_s(completed),
        "request_goodput": _goodput(options, ttft, tpot_all, e2el, per_s),
        "output_throughput": per_s(int(output.sum())),
        "total_token_throughput": per_s(int(prompt.sum() + output.sum())),
    }
    percentiles = parse_percentiles(options.metric_percentiles)
    for name in parse_percentile_metrics(options.percentile_metrics):
        out.update(_stats(name, values[name], percentiles))
    out["itl_estimated_requests"] = estimated
    return out


def _goodput(options: Options, ttft: np.ndarray, tpot: np.ndarray, e2el: np.ndarray,
             per_s: Any) -> float | None:
    """Requests meeting every SLO per second; None without --goodput."""
    slos = parse_goodput(options.goodput)
    if not slos:
        return None
    good = np.ones(len(ttft), dtype=bool)
    for name, series in (("ttft", ttft), ("tpot", tpot), ("e2el", e2el)):
        if name in slos:
            good &= series <= slos[name] / 1000.0
    rate: float | None = per_s(int(good.sum()))
    return rate
