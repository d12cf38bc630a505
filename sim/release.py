"""Which vLLM release a run follows: ``--vllm-version``, ``--vllm-override`` and their checks.

The release's behaviour is one ``VllmProfile`` (``allocator/profiles.py``): the allocator reads
its block-manager switches, the scheduler (``sim/sched/``) its admission gate, lone-request and
priority switches, and resolution its engine defaults (GPU memory utilisation). This module
turns the options into that profile, refuses combinations a release lacks (one line naming the
option) and says what was resolved, for the configuration block and ``config.json``.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from allocator.profiles import VERSIONS, VllmProfile, apply_overrides, profile_for

POLICIES = ("fcfs", "priority")
DEFAULT_VERSION = VERSIONS[-1]

Problem = tuple[str, str]
"""(option name, one-line message) of a refused value."""


def resolve_profile(version: str, overrides: Sequence[str]) -> VllmProfile:
    """The profile of ``version`` with every ``NAME=VALUE`` override applied.

    Raises:
        ValueError: one line naming ``--vllm-version`` or ``--vllm-override``.
    """
    try:
        profile = profile_for(version)
    except ValueError as exc:
        raise ValueError(f"--vllm-version: {exc}") from None
    try:
        return apply_overrides(profile, overrides)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"--vllm-override: {exc}") from None


def release_problem(version: str, overrides: Sequence[str], policy: str, threshold: int,
                    max_active: int | None, max_num_seqs: int) -> Problem | None:
    """What is wrong with the release options as given (None: nothing)."""
    try:
        profile = resolve_profile(version, overrides)
    except ValueError as exc:
        name = "vllm_version" if str(exc).startswith("--vllm-version") else "vllm_overrides"
        return name, str(exc)
    return scheduler_problem(profile, policy, threshold, max_active, max_num_seqs)


def scheduler_problem(profile: VllmProfile, policy: str, threshold: int,
                      max_active: int | None, max_num_seqs: int) -> Problem | None:
    """What is wrong with the scheduler's release switches under ``profile`` (None: nothing)."""
    if policy not in POLICIES:
        return "scheduling_policy", (f"--scheduling-policy: invalid choice {policy!r} "
                                     f"(choose from {', '.join(POLICIES)})")
    if threshold < 0:
        return "long_prefill_token_threshold", ("--long-prefill-token-threshold must be >= 0, "
                                                f"got {threshold}")
    if max_active is None:
        return None
    if not profile.max_num_active_seqs_option:
        return "max_num_active_seqs", ("--max-num-active-seqs exists from vLLM 0.31: give "
                                       f"--vllm-version 0.31 or later (got {profile.version})")
    if not 1 <= max_active <= max_num_seqs:
        return "max_num_active_seqs", (f"--max-num-active-seqs must be in 1 .. --max-num-seqs "
                                       f"({max_num_seqs}), got {max_active}")
    return None


def gpu_memory_utilization(given: float | None, profile: VllmProfile) -> float:
    """``--gpu-memory-utilization``, else the release's default (0.9; 0.92 from 0.20)."""
    return profile.gpu_memory_utilization if given is None else given


def max_in_flight_tokens(profile: VllmProfile, max_num_batched_tokens: int) -> int | None:
    """The term of the sliding-window admission cap: ``max_num_batched_tokens`` (0.20-0.25),
    or max concurrent batches x it (0.26+; one batch, as async scheduling is not modelled
    here); None where the release has no cap."""
    if profile.swa_admission_cap == "none":
        return None
    return max_num_batched_tokens


def add_release_options(group: argparse._ArgumentGroup, defaults: Any) -> None:
    """The release and scheduling-policy options (``defaults``: an ``Options``)."""
    group.add_argument("--vllm-version", default=defaults.vllm_version,
                       help=f"vLLM release to follow ({VERSIONS[0]} ... {VERSIONS[-1]})")
    group.add_argument("--vllm-override", dest="vllm_overrides", action="append",
                       metavar="NAME=VALUE", type=str, default=None,
                       help="change one switch of the release profile (repeatable; names in "
                            "allocator/README.md)")
    group.add_argument("--scheduling-policy", choices=POLICIES,
                       default=defaults.scheduling_policy,
                       help="waiting order and preemption victim (priority: the trace's "
                            "priority column, lower first)")
    group.add_argument("--long-prefill-token-threshold", type=int,
                       default=defaults.long_prefill_token_threshold,
                       help="most tokens of one prefill chunk (0: no limit)")
    group.add_argument("--max-num-active-seqs", type=int, default=defaults.max_num_active_seqs,
                       help="most sequences admitted to run (vLLM 0.31+; default: "
                            "--max-num-seqs)")


def describe_release(profile: VllmProfile, policy: str, threshold: int,
                     max_active: int | None) -> str:
    """The resolved profile and scheduling switches, one line."""
    return (f"  {profile.describe()}; scheduling policy {policy}, long prefill threshold "
            f"{threshold or 'off'}, max_num_active_seqs {max_active or 'max_num_seqs'}")
