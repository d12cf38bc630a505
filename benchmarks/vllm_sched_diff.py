"""``vllm_diff.py --scheduler``: vLLM's v1 Scheduler and pagedsim's, step by step.

Seeded streams (``vllm_sched_stream.py``, seeds S, S+1, ...) go through vLLM's worker
(``vllm_sched_worker.py``) and pagedsim (``vllm_sched_pagedsim.py``); every step's record is
compared (scheduled requests and token counts, admissions, preemption victims, finishes, every
running request's block ids). A stream's first divergence is classified and counted; the run's
first one is shrunk to a minimal request set, printed and written to ``--out`` for ``--replay``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from vllm_sched_pagedsim import FEATURES, run_pagedsim, unavailable
from vllm_sched_stream import make_stream

CLASSES = ("chunked prefill", "admission gate", "recompute preemption", "priority",
           "spec decoding", "async", "finish", "block tables")
MAX_SHRINK_RUNS = 400
SPEC_METHODS = ("ngram", "eagle", "draft_model")


class Worker(Protocol):
    def run(self, payload: Any) -> Any: ...


def first_divergence(ours: list[Any], theirs: list[Any]) -> int:
    """The first step whose records differ, or -1."""
    for step, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return step
    return -1 if len(ours) == len(theirs) else min(len(ours), len(theirs))


def classify(config: dict[str, Any], ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    """The behaviour class of a diverging step: the stream's feature when it uses one, else
    the first differing part of the record (preemption, then admission, then token counts)."""
    if config["async"]:
        return "async"
    if config["spec"]:
        return "spec decoding"
    if config["policy"] == "priority":
        return "priority"
    if ours["preempted"] != theirs["preempted"]:
        return "recompute preemption"
    if ours["admitted"] != theirs["admitted"]:
        return "admission gate"
    if ours["scheduled"] != theirs["scheduled"]:
        return "chunked prefill"
    return "finish" if ours["finished"] != theirs["finished"] else "block tables"


def compare(worker: Worker, stream: dict[str, Any], version: str,
            tally: dict[str, int] | None = None) -> tuple[int, str]:
    """(first diverging step or -1, its class) for one stream; ``tally`` counts what vLLM did
    in the steps compared."""
    theirs, ours = worker.run(stream), run_pagedsim(stream, version)
    step = first_divergence(ours, theirs)
    if tally is not None:
        count(tally, theirs[:step + 1] if step >= 0 else theirs)
    if step < 0:
        return -1, ""
    return step, classify(stream["config"], ours[step], theirs[step])


def count(tally: dict[str, int], records: list[dict[str, Any]]) -> None:
    """Add the records' steps, admissions, preemptions, finishes and prefill chunks."""
    tally["steps"] = tally.get("steps", 0) + len(records)
    for name in ("admitted", "preempted", "finished"):
        tally[name] = tally.get(name, 0) + sum(len(r[name]) for r in records)
    tally["entries > 1 token"] = tally.get("entries > 1 token", 0) + sum(
        1 for r in records for _, n in r["scheduled"] if n > 1)


def shrink(worker: Worker, stream: dict[str, Any], version: str, kind: str) -> dict[str, Any]:
    """Delta-debug the requests of a stream diverging with class ``kind`` down to a 1-minimal
    list (and its steps to the divergence)."""
    runs = 0

    def diverges(candidate: dict[str, Any]) -> bool:
        nonlocal runs
        runs += 1
        return runs <= MAX_SHRINK_RUNS and compare(worker, candidate, version)[1] == kind

    step = compare(worker, stream, version)[0]
    stream = {**stream, "config": {**stream["config"], "num_steps": step + 1}}
    requests = [r for r in stream["requests"] if r["arrival"] <= step]
    chunk = max(1, len(requests) // 2)
    while chunk >= 1:
        i, removed = 0, False
        while i < len(requests):
            candidate = requests[:i] + requests[i + chunk:]
            if candidate and diverges({**stream, "requests": candidate}):
                requests, removed = candidate, True
            else:
                i += chunk
        if not removed:
            chunk //= 2
    small = {**stream, "requests": requests}
    last = compare(worker, small, version)[0]
    return {**small, "config": {**small["config"], "num_steps": last + 1}}


def describe(worker: Worker, stream: dict[str, Any], version: str) -> str:
    """A replayable description: configuration, requests, the diverging step's fields."""
    theirs, ours = worker.run(stream), run_pagedsim(stream, version)
    step = first_divergence(ours, theirs)
    lines = [f"config {json.dumps(stream['config'])}"]
    if step >= min(len(ours), len(theirs)):
        return "\n".join(lines + [f"records end: pagedsim {len(ours)} steps, vllm {len(theirs)}"])
    for r in stream["requests"]:
        lines.append(f"  {r['id']}: arrives step {r['arrival']}, prompt {len(r['prompt'])} "
                     f"tokens {r['prompt'][:8]}..., max_tokens {r['max_tokens']}, "
                     f"priority {r['priority']}")
    lines.append(f"step {step} differs:")
    for name in ours[step]:
        if ours[step][name] != theirs[step][name]:
            lines.append(f"  {name}: pagedsim {ours[step][name]}\n"
                         f"  {' ' * len(name)}  vllm     {theirs[step][name]}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The --scheduler mode's options (vllm_diff.py's parser)."""
    g = parser.add_argument_group("scheduler mode (--scheduler)")
    g.add_argument("--scheduler", action="store_true",
                   help="compare vLLM's v1 Scheduler with pagedsim's, step by step")
    g.add_argument("--steps", type=int, default=2000, help="steps in all (default 2000)")
    g.add_argument("--episode-steps", type=int, default=200,
                   help="steps per seeded stream (default 200)")
    g.add_argument("--policy", choices=("fcfs", "priority"), default="fcfs",
                   help="scheduling policy (default fcfs)")
    g.add_argument("--spec", type=int, default=0, metavar="K",
                   help="speculative decoding with K draft tokens (default 0: off)")
    g.add_argument("--spec-method", choices=SPEC_METHODS, default="ngram",
                   help="the drafting method of --spec (default ngram)")
    g.add_argument("--async", dest="async_scheduling", action="store_true",
                   help="async scheduling (one step of outputs in flight)")
    g.add_argument("--vllm-scheduler-config", action="append", default=[], metavar="NAME=VALUE",
                   help="set a field of vLLM's SchedulerConfig (VALUE as JSON, repeatable), "
                        "e.g. scheduler_reserve_full_isl=false")
    g.add_argument("--record", type=Path, metavar="FILE",
                   help="write the first stream and vLLM's records to FILE (a golden test)")


def run_scheduler(args: argparse.Namespace, worker: Worker, version: str) -> int:
    """Run the --scheduler comparison; 1 when anything diverged, 2 on bad options."""
    if args.steps < 1 or args.episode_steps < 1 or args.spec < 0:
        print("--steps and --episode-steps must be >= 1, --spec >= 0", file=sys.stderr)
        return 2
    try:
        args.vllm_scheduler = parse_overrides(args.vllm_scheduler_config)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    refused = async_refusal(args, version)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    streams = _streams(args)
    if args.record:
        _record(worker, streams[0], args.record)
    missing = unavailable(streams[0]["config"])
    if missing:
        needs = sorted({f for name in missing for f in FEATURES[name]})
        print(f"{', '.join(missing)}: not available in this pagedsim (Options lacks "
              f"{', '.join(needs)}); running vLLM only")
    start = time.perf_counter()
    tally: dict[str, int] = {}
    found: dict[str, list[tuple[int, int]]] = {kind: [] for kind in CLASSES}
    for stream in streams:
        if missing:
            count(tally, worker.run(stream))
            continue
        step, kind = compare(worker, stream, version, tally)
        if step >= 0:
            if not any(found.values()):
                _report(worker, stream, version, kind, args.out)
            found[kind].append((stream["config"]["seed"], step))
    diverging = sum(len(where) for where in found.values())
    what = "run in vLLM only" if missing else "compared"
    print(f"{tally.get('steps', 0):,} steps {what} in {len(streams)} streams, {diverging} "
          f"diverging, {time.perf_counter() - start:.1f} s; vLLM there: " + ", ".join(
              f"{v:,} {k}" for k, v in tally.items() if k != "steps"))
    for kind, where in found.items():
        first = f" (first: seed {where[0][0]} step {where[0][1]})" if where else ""
        print(f"  {kind}: {len(where)}{first}")
    return 1 if diverging else 0


def async_refusal(args: argparse.Namespace, version: str) -> str:
    """Why vLLM ``version`` refuses ``--async`` with the drafting method (its config checks:
    EAGLE everywhere, a draft model from 0.19, n-gram on the CPU never), or ''."""
    if not (args.spec and args.async_scheduling) or args.replay:
        return ""
    minor = int(version.split(".")[1])
    if args.spec_method == "eagle" or (args.spec_method == "draft_model" and minor >= 19):
        return ""
    return (f"--async with --spec-method {args.spec_method}: vLLM {version} refuses it "
            "(use --spec-method eagle, or drop --async)")


def _streams(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.replay:
        loaded = json.loads(args.replay.read_text())
        return [loaded.get("stream", loaded)]
    count = -(-args.steps // args.episode_steps)
    streams = [make_stream(args.seed + i, args.episode_steps, policy=args.policy,
                           spec=args.spec, spec_method=args.spec_method,
                           async_scheduling=args.async_scheduling)
               for i in range(count)]
    for stream in streams:
        stream["config"]["vllm_scheduler"] = args.vllm_scheduler
    return streams


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """NAME=VALUE pairs, VALUE read as JSON where it parses (else kept as text)."""
    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--vllm-scheduler-config {item!r}: expected NAME=VALUE")
        try:
            values[name] = json.loads(text)
        except ValueError:
            values[name] = text
    return values


def _record(worker: Worker, stream: dict[str, Any], path: Path) -> None:
    """The stream and vLLM's records, compact JSON (one line per step)."""
    records = worker.run(stream)
    lines = [json.dumps(r, separators=(",", ":")) for r in records]
    text = ('{"stream": ' + json.dumps(stream, separators=(",", ":"))
            + ',\n"records": [\n' + ",\n".join(lines) + "\n]}\n")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    print(f"stream and vLLM's {len(records)} records written to {path}")


def _report(worker: Worker, stream: dict[str, Any], version: str, kind: str, out: Any) -> None:
    print(f"seed {stream['config']['seed']}: first divergence ({kind}); shrinking ...")
    small = shrink(worker, stream, version, kind)
    print(f"minimal stream ({len(small['requests'])} requests):")
    print(describe(worker, small, version))
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(small))
    os.replace(tmp, out)
    print(f"written to {out} (replay with --scheduler --replay {out})")
