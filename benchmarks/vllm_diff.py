"""Drive vLLM's own KVCacheManager and pagedsim's, under the matching profile, op by op.

    python benchmarks/vllm_diff.py --vllm-python VENV/bin/python --ops 100000
    python benchmarks/vllm_diff.py --vllm-python PY --replay divergence.json

One seeded stream (``vllm_diff_stream.py``) runs in the interpreter PY through vLLM (a
subprocess speaking JSON lines, ``vllm_diff_worker.py``) and here through pagedsim with
``profile_for(--version)`` (default: the release PY has). After every operation the two
observations are compared: the call's result (hit length and ids, new block ids), free count,
free-queue order, every block's ref count and hash, every request's block table. A divergence
is shrunk to a minimal stream, printed and written to ``--out`` for ``--replay``.
``--digest`` prints a digest of all observations (the golden tests hold those from vLLM).

Scheduler mode (``vllm_sched_diff.py``): vLLM's v1 ``Scheduler`` on the CPU, fed fake model
outputs, beside pagedsim's ``Scheduler`` over seeded arrival streams, compared every step
(scheduled requests and token counts, admissions, preemption victims, finishes, block ids)::

    python benchmarks/vllm_diff.py --scheduler --vllm-python PY --steps N --seed S
        [--policy priority] [--spec K [--spec-method ngram|eagle|draft_model]] [--async]
        [--episode-steps 200]
        [--vllm-scheduler-config NAME=VALUE] [--record FILE] [--replay FILE]

It prints the first divergence as a minimal replayable stream (written to ``--out``) and the
diverging streams per class (chunked prefill, admission gate, recompute preemption, priority,
spec decoding, async). A class whose options this pagedsim lacks runs in vLLM only.
VENV: ``python3.11 -m venv VENV; VENV/bin/pip install torch==2.13.0`` (CPU), ``pip install
--no-deps vllm==X``, then the packages the import of ``vllm.v1.core.kv_cache_manager`` asks for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vllm_diff_ops import Executor, Observation
from vllm_diff_stream import PagedsimBackend, make_episodes
from vllm_sched_diff import add_arguments, run_scheduler

from allocator.hashing import init_none_hash, sha256
from allocator.profiles import VllmProfile, apply_overrides, profile_for

WORKER = Path(__file__).resolve().parent / "vllm_diff_worker.py"
SCHED_WORKER = Path(__file__).resolve().parent / "vllm_sched_worker.py"
HASH_SEED = "0"


class VllmWorker:
    """vLLM's executor in its own interpreter; one JSON line per episode each way."""

    def __init__(self, python: str, worker: Path = WORKER) -> None:
        env = {**os.environ, "PYTHONHASHSEED": HASH_SEED, "VLLM_LOGGING_LEVEL": "ERROR"}
        env.pop("VLLM_PREFIX_CACHE_RETENTION_INTERVAL", None)
        # stderr goes to a file: vLLM's log lines would fill a pipe and block the worker.
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in close())
        try:
            self.proc = subprocess.Popen(
                [python, str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self.stderr, text=True, env=env,
            )
        except OSError as exc:
            refuse(f"--vllm-python {python}: cannot run it ({exc})")
        self.hello = self._read()

    def _read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        while line and line[:1] not in "[{":  # a log line some releases print to stdout
            line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=60)
            self.stderr.seek(0)
            err = self.stderr.read()
            refuse(f"--vllm-python: the vLLM worker stopped: {err.strip().splitlines()[-1:]}")
        return json.loads(line)

    def run(self, episode: dict[str, Any]) -> list[Observation]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(episode) + "\n")
        self.proc.stdin.flush()
        return self._read()  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.stderr.close()


def run_pagedsim(episode: dict[str, Any], profile: VllmProfile) -> list[Observation]:
    """pagedsim's observations for one episode (JSON round trip, as vLLM's come)."""
    executor = Executor(PagedsimBackend(profile), episode["config"])
    return json.loads(json.dumps(executor.run(episode["ops"])))  # type: ignore[no-any-return]


def first_divergence(ours: list[Observation], theirs: list[Observation]) -> int:
    """Index of the first operation whose observations differ, or -1."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return i
    return -1 if len(ours) == len(theirs) else min(len(ours), len(theirs))


def shrink(episode: dict[str, Any], diverges: Any) -> dict[str, Any]:
    """Delta-debug the ops of a diverging episode down to a 1-minimal diverging list."""
    ops = episode["ops"]
    chunk = max(1, len(ops) // 2)
    while chunk >= 1:
        i, removed = 0, False
        while i < len(ops):
            candidate = ops[:i] + ops[i + chunk:]
            if candidate and diverges({**episode, "ops": candidate}):
                ops, removed = candidate, True
            else:
                i += chunk
        if not removed:
            chunk //= 2
    return {**episode, "ops": ops}


FIELDS = ("result", "free count", "free queue", "ref counts", "block hashes", "block tables")


def describe(ours: Observation, theirs: Observation) -> str:
    """The fields that differ, pagedsim's value then vLLM's."""
    return "\n".join(
        f"  {name}: pagedsim {a!r}\n  {' ' * len(name)}  vllm     {b!r}"
        for name, a, b in zip(FIELDS, ours, theirs) if a != b
    )


def digest(observations: list[list[Observation]]) -> str:
    """blake2b-128 over the JSON of every observation."""
    return hashlib.blake2b(json.dumps(observations).encode(), digest_size=16).hexdigest()


def summary(observations: list[list[Observation]]) -> dict[str, int]:
    """Counts over a stream's observations: ops, admissions with a hit, failed calls, errors."""
    flat = [obs[0] for episode in observations for obs in episode]
    lists = [r for r in flat if isinstance(r, list) and len(r) == 3 and isinstance(r[0], int)]
    return {
        "ops": len(flat),
        "hits": sum(1 for r in lists if r[0] > 0),
        "failed": sum(1 for r in flat if r == "preempted") + sum(1 for r in lists if r[2] is None),
        "errors": sum(1 for r in flat if isinstance(r, str) and r.startswith("error")),
    }


def pagedsim_stream(seed: int, num_ops: int, profile: VllmProfile) -> list[list[Observation]]:
    """pagedsim's observations over the seeded stream (what the golden tests digest)."""
    return [run_pagedsim(episode, profile) for episode in make_episodes(seed, num_ops, profile)]



def refuse(message: str) -> NoReturn:
    """Bad input: one line on stderr, exit status 2."""
    print(f"vllm_diff.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-python", required=True, help="interpreter with vllm installed")
    parser.add_argument("--ops", type=int, default=10_000, help="operations (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="stream seed (default 0)")
    parser.add_argument("--version", help="pagedsim profile (default: the worker's vLLM)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override one profile switch (repeatable)")
    parser.add_argument("--replay", type=Path, help="replay a stream written by --out")
    parser.add_argument("--out", type=Path, default=Path("vllm_diff_divergence.json"),
                        help="where a minimal diverging stream goes")
    parser.add_argument("--digest", action="store_true", help="print the observation digest")
    parser.add_argument("--keep-going", action="store_true", help="count all divergences")
    add_arguments(parser)
    args = parser.parse_args(argv)
    os.environ["PYTHONHASHSEED"] = HASH_SEED
    init_none_hash(sha256)
    logging.getLogger("allocator").setLevel(logging.ERROR)
    if args.scheduler:
        return _scheduler_mode(args)
    worker = VllmWorker(args.vllm_python)
    try:
        profile = profile_for(args.version or worker.hello["vllm"])
        profile = apply_overrides(profile, args.set)
    except ValueError as exc:
        refuse(f"--version/--set: {exc}")
    print(f"vLLM {worker.hello['vllm']} ({args.vllm_python}) vs pagedsim, {profile.describe()}")
    if args.replay:
        try:
            episodes = [json.loads(args.replay.read_text())]
        except (OSError, ValueError) as exc:
            refuse(f"--replay {args.replay}: {exc}")
    else:
        episodes = make_episodes(args.seed, args.ops, profile)
    return _compare(worker, episodes, profile, args)


def _scheduler_mode(args: argparse.Namespace) -> int:
    if args.replay:
        try:
            loaded = json.loads(args.replay.read_text())
            loaded.get("stream", loaded)["config"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"--replay {args.replay}: not a scheduler stream ({exc})", file=sys.stderr)
            return 2
    if args.out == Path("vllm_diff_divergence.json"):
        args.out = Path("vllm_sched_divergence.json")
    worker = VllmWorker(args.vllm_python, SCHED_WORKER)
    version = args.version or worker.hello["vllm"]
    try:
        profile_for(version)
    except ValueError as exc:
        print(f"--version: {exc}", file=sys.stderr)
        worker.close()
        return 2
    print(f"vLLM {worker.hello['vllm']} scheduler ({args.vllm_python}) vs pagedsim {version}")
    code = run_scheduler(args, worker, version)
    worker.close()
    return code


def _compare(worker: VllmWorker, episodes: list[dict[str, Any]], profile: VllmProfile,
             args: argparse.Namespace) -> int:
    start = time.perf_counter()
    num_ops = num_div = num_episodes = 0
    all_theirs = []
    for index, episode in enumerate(episodes):
        num_episodes += 1
        theirs, ours = worker.run(episode), run_pagedsim(episode, profile)
        all_theirs.append(theirs)
        num_ops += len(episode["ops"])
        at = first_divergence(ours, theirs)
        if at < 0:
            continue
        num_div += 1
        if num_div == 1:
            _report(worker, episode, profile, index, at, args.out)
        if not args.keep_going:
            break
    wall = time.perf_counter() - start
    print(f"{num_ops:,} operations in {num_episodes} episodes, {num_div} diverging "
          f"episode(s), {wall:.1f} s")
    if args.digest:
        print(f"digest {digest(all_theirs)} {summary(all_theirs)} (vLLM observations)")
    worker.close()
    return 1 if num_div else 0


def _report(worker: VllmWorker, episode: dict[str, Any], profile: VllmProfile, index: int,
            at: int, out: Path) -> None:
    def diverges(candidate: dict[str, Any]) -> bool:
        return first_divergence(run_pagedsim(candidate, profile), worker.run(candidate)) >= 0

    print(f"episode {index} diverges at op {at}: {episode['ops'][at]}")
    small = shrink({**episode, "ops": episode["ops"][: at + 1]}, diverges)
    ours, theirs = run_pagedsim(small, profile), worker.run(small)
    at = first_divergence(ours, theirs)
    print(f"minimal stream ({len(small['ops'])} ops), config {small['config']}:")
    for op in small["ops"]:
        print(f"  {json.dumps(op)}")
    print(f"op {at} differs:\n{describe(ours[at], theirs[at])}")
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(small, indent=1))
    os.replace(tmp, out)
    print(f"written to {out} (replay with --replay {out})")


if __name__ == "__main__":
    sys.exit(main())
