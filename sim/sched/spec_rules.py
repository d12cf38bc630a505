"""Per-release rules for speculative decoding and async scheduling (resolved once per run).

Read from vLLM's ``config/vllm.py`` (``num_lookahead_tokens``, the async-scheduling checks)
and ``v1/core/sched/scheduler.py`` at 0.14, 0.19 and 0.33 only; a release in between follows
the newest of those three at or below it. Lookahead slots: EAGLE always reserves K,
``draft_model`` from 0.19, n-gram never. Async scheduling by default (``None``): on unless a
drafting method turns it off, EAGLE keeping it on everywhere and ``draft_model`` from 0.33;
asked for explicitly (``--async-scheduling``) it is refused with n-gram everywhere and with
``draft_model`` before 0.19, as vLLM raises. Swap preemption (vLLM v0) runs synchronously.
"""
from __future__ import annotations

from typing import Any

from allocator.profiles import VllmProfile, num_hash_lookahead_tokens, profile_for
from sim.config import OptionError, Options, RunConfig, SchedulerConfig, spec_options
from sim.cost.spec_cost import SpecConfig
from traces import Trace

DEFAULT_VERSION = "0.33"
"""The release whose profile applies when the options name none."""


def _minor(profile: VllmProfile) -> int:
    return int(profile.version.split(".")[1])


def run_profile(options: Options) -> VllmProfile:
    """The release profile of a run (``--vllm-version`` where that option exists)."""
    return profile_for(str(getattr(options, "vllm_version", None) or DEFAULT_VERSION))


def lookahead_tokens(spec: SpecConfig | None, profile: VllmProfile) -> int:
    """Slots vLLM's scheduler reserves for drafts in ``allocate_slots``."""
    if spec is None:
        return 0
    if spec.method == "eagle" or (spec.method == "draft_model" and _minor(profile) >= 19):
        return spec.k
    return 0


def draft_slots(spec: SpecConfig | None, profile: VllmProfile) -> int:
    """Input slots a scheduled request takes for drafting beyond its tokens (0.33's
    ``max_num_new_slots_for_drafting``: one for a sequential draft model, else none)."""
    if spec is None or spec.method != "draft_model" or not profile.draft_input_slots:
        return 0
    return 1


def async_scheduling(options: Options, spec: SpecConfig | None, profile: VllmProfile) -> bool:
    """Whether the run schedules asynchronously (OptionError where vLLM refuses)."""
    method = spec.method if spec is not None else None
    minor = _minor(profile)
    if options.preemption == "swap":  # a vLLM v0 mode: v1's async scheduler never swaps
        if options.async_scheduling:
            raise OptionError("async_scheduling", "--async-scheduling cannot be combined with "
                                                  "--preemption swap (use --no-async-scheduling)")
        return False
    allowed = method in (None, "eagle") or (method == "draft_model" and minor >= 19)
    if options.async_scheduling:
        if not allowed:
            raise OptionError("async_scheduling", (
                f"--async-scheduling is not supported with {method} speculative decoding in "
                f"vLLM {profile.version} (use --no-async-scheduling)"))
        return True
    if options.async_scheduling is False:
        return False
    on_by_default = method in (None, "eagle") or (method == "draft_model" and minor >= 33)
    return profile.async_scheduling_default and on_by_default


def scheduler_fields(options: Options) -> dict[str, Any]:
    """The ``SchedulerConfig`` fields of speculative decoding and async scheduling."""
    spec, rates = spec_options(options)
    profile = run_profile(options)
    return {"spec": spec, "acceptance": rates,
            "num_lookahead_tokens": lookahead_tokens(spec, profile),
            "use_eagle": spec is not None and spec.method == "eagle",
            "draft_slots": draft_slots(spec, profile),
            "async_scheduling": async_scheduling(options, spec, profile),
            "async_skip_undelivered": profile.async_skip_undelivered_preempted}


def set_eagle(manager: Any, sched: SchedulerConfig, caching: bool) -> int:
    """Tell a manager that has ``use_eagle`` (the paged one) about EAGLE drafts and its
    requests' hash lookahead (``hash_lookahead_tokens``, with it no block drop); return the
    lookahead the block hasher must take (0.33: 1 for EAGLE with prefix caching on)."""
    method = sched.spec.method if sched.spec is not None else None
    lookahead = num_hash_lookahead_tokens(sched.vllm_profile, method, caching)
    if hasattr(manager, "use_eagle"):
        manager.use_eagle = sched.use_eagle
        manager.hash_lookahead_tokens = lookahead
    return lookahead


def describe_spec(sched: SchedulerConfig) -> str:
    """The run header's line on async scheduling and speculative decoding."""
    line = f"  async scheduling {'on' if sched.async_scheduling else 'off'}"
    spec = sched.spec
    if spec is None:
        return line + ", no speculative decoding"
    rates = ",".join(f"{r:g}" for r in sched.acceptance)
    return (f"{line}, speculative decoding {spec.method} K={spec.k} (acceptance {rates}, "
            f"lookahead {sched.num_lookahead_tokens})")


def check_spec_trace(config: RunConfig, trace: Trace) -> None:
    """Refuse speculative decoding for requests that fork (n > 1 with cow sampling, beam
    search), which the simulator does not draft for (OptionError, one line)."""
    if config.scheduler.spec is None:
        return
    workload = config.workload
    n = [workload.n] if workload.n is not None else trace.n.tolist()
    beams = [workload.beam_width] if workload.beam_width is not None else \
        trace.beam_width.tolist()
    cow = config.scheduler.sampling_mode == "cow"
    if max(beams, default=1) > 1 or (cow and max(n, default=1) > 1):
        raise OptionError("speculative_config", (
            "--speculative-config: requests with n > 1 or beam search are not simulated with "
            "speculative decoding (use --sampling-mode fanout, --beam-width 1)"))
