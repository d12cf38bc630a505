"""Release profiles: what differs between vLLM 0.14 and 0.33, one switch per behaviour class.

A :class:`VllmProfile` is a frozen record of switches. The block manager reads the allocator
switches at one place each (free order in ``BlockPool.free_blocks``, the null block in
``touch``/``free_blocks``, extra keys in ``hashing``, ...); code tests switches, never
versions. ``profile_for("0.33")`` folds the release table :data:`CHANGES` up to that release;
``profile.replace(free_order="append")`` or ``apply_overrides(profile, ["free_order=append"])``
change single switches. The scheduler and engine fields are plain data for the simulator.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

VERSIONS = tuple(f"0.{minor}" for minor in range(14, 34))
"""Every minor release with a profile, oldest first."""

CHOICES: dict[str, tuple[str, ...]] = {
    "free_order": ("append", "swa_split", "lifo_unhashed", "lifo_cached_only"),
    "null_block_ref_cnt": ("counted", "untracked"),
    "extra_keys": ("plain", "mm_offset", "tagged"),
    "cascade_prefix": ("computed", "zeros"),
    "swa_cache_mask": ("dense", "mask"),
    "ext_clamp": ("whole_block", "any_token"),
    "none_hash_seed": ("random", "fixed"),
    "full_sequence_check": ("none", "can_fit_full_sequence", "allocate_slots"),
    "swa_admission_cap": ("none", "every_check", "full_sequence"),
    "swa_admission_cap_tokens": ("max_num_batched_tokens", "max_in_flight_tokens"),
    "output_caching": ("async", "async_or_spec"),
    "draft_padding": ("none", "with_running", "with_running_or_hit"),
}
"""The allowed values of every string switch."""


@dataclass(frozen=True, slots=True)
class VllmProfile:
    """The behaviour of one vLLM release (defaults: 0.14), for one KV-cache group.

    Block manager (``allocator/``; semantics doc classes C1-C9):
        free_order: where freed blocks go. ``append``: tail, in the order given;
            ``swa_split``: sliding-window frees put unhashed blocks at the front;
            ``lifo_unhashed``: every free puts unhashed blocks (all, with caching off) at
            the front, keeping their order; ``lifo_cached_only``: the same, but with
            caching off everything goes to the tail (C1).
        null_block_ref_cnt: ``counted`` (touch/free change the null block's ref_cnt, which
            drifts) or ``untracked`` (it stays 0) (C2).
        extra_keys: hash extra-key format: ``plain`` (salt, LoRA name), ``mm_offset``
            (multimodal offsets; same as plain for salt and LoRA), ``tagged``
            (``("cache_salt", s)``, ``("lora", name, path)``) (C3).
        cascade_prefix: ``get_num_common_prefix_blocks`` ``computed`` or always ``zeros`` (C4).
        swa_cache_mask: sliding window hashes ``dense``ly (every full block) or through the
            reachable-block ``mask`` (C5), with ``prefix_cache_retention_interval``: None
            (dense tails; window 1 caches nothing), 0 (only the window ending at the prompt's
            replay boundary) or k > 0 (one tail per k-token segment as well).
        ext_clamp: external tokens clamped when a ``whole_block`` is skipped, or when
            ``any_token`` is (C6).
        zero_token_adopt: ``allocate_slots(num_new_tokens=0)`` accepted when it adopts a
            prefix hit (C8).
        none_hash_seed: without PYTHONHASHSEED, NONE_HASH is ``random`` or ``fixed``
            (``"vllm-none-hash"`` for the sha256 family) (C9).
        full_sequence_check: the manager API the scheduler's admission gate calls (C7).
        swa_admission_cap: the sliding-window cap on a request's required blocks: ``none``,
            in ``every_check`` (0.20) or in the ``full_sequence`` check only (0.21+).
        watermark: the ``watermark`` default (fraction of blocks kept free when admitting),
            None where the option does not exist.
        hash_lookahead: with EAGLE and prefix caching on, a block's hash also covers the token
            after it (exists once that token does), and prefix hits keep their last block;
            False hashes blocks alone and drops it (:func:`num_hash_lookahead_tokens`).

    Scheduler and engine (plain data):
        reserve_full_isl: admit a waiting request only if its whole prompt fits (C7).
        swa_admission_cap_tokens: the term of the cap: ``max_num_batched_tokens`` or
            ``max_in_flight_tokens`` (max concurrent batches x max_num_batched_tokens).
        long_prefill_lone_request: ``long_prefill_token_threshold`` is not applied when only
            one request is running or waiting.
        priority_self_preemption_continue: a priority request that preempted itself goes on
            to the requests behind it (else the running loop stops).
        async_scheduling_default: async scheduling on by default (where supported).
        async_in_flight_swa_free: sliding-window frees count ``num_in_flight_tokens``.
        async_skip_undelivered_preempted: preempted requests with undelivered outputs wait.
        output_caching: which steps' outputs cache the blocks they complete as they arrive
            (before a finished request is freed): ``async`` (async scheduling only) or
            ``async_or_spec`` (speculative decoding as well).
        draft_padding: speculative decoding pads a waiting request with one token left to
            ``1 + K`` tokens of placeholder drafts (always rejected): ``none``;
            ``with_running`` (when running requests were scheduled and none is mid-prefill;
            admission stops when the padded request would pass the budget or the model
            length); ``with_running_or_hit`` (also for a request with computed tokens; left
            unpadded without room for the sampled token).
        admission_lookahead: a waiting request's first chunk also reserves the draft
            lookahead slots (``num_lookahead_tokens``: EAGLE, draft model); before, a request
            with no computed tokens reserved none.
        draft_input_slots: each scheduled request also takes its method's drafting slots
            (one for a sequential draft model) from the step's input budget.
        gpu_memory_utilization: the engine default.
        max_num_active_seqs_option: the ``max_num_active_seqs`` admission limit exists.
    """

    version: str = "0.14"
    free_order: str = "append"
    null_block_ref_cnt: str = "counted"
    extra_keys: str = "plain"
    cascade_prefix: str = "computed"
    swa_cache_mask: str = "dense"
    prefix_cache_retention_interval: int | None = None
    ext_clamp: str = "whole_block"
    zero_token_adopt: bool = False
    none_hash_seed: str = "random"
    full_sequence_check: str = "none"
    swa_admission_cap: str = "none"
    watermark: float | None = None
    hash_lookahead: bool = False
    reserve_full_isl: bool = False
    swa_admission_cap_tokens: str = "max_num_batched_tokens"
    long_prefill_lone_request: bool = False
    priority_self_preemption_continue: bool = False
    async_scheduling_default: bool = True
    async_in_flight_swa_free: bool = False
    async_skip_undelivered_preempted: bool = False
    output_caching: str = "async"
    draft_padding: str = "none"
    admission_lookahead: bool = False
    draft_input_slots: bool = False
    gpu_memory_utilization: float = 0.9
    max_num_active_seqs_option: bool = False

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(
                    f"profile switch {name}={value!r} is not one of {', '.join(allowed)}"
                )
        interval = self.prefix_cache_retention_interval
        if interval is not None and interval < 0:
            raise ValueError(f"prefix_cache_retention_interval must be >= 0, got {interval}")
        if self.watermark is not None and not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )

    def replace(self, **changes: Any) -> VllmProfile:
        """A copy with the given switches changed (validated like a new profile)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown profile switch(es): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Every field, in declaration order (for config files)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def describe(self) -> str:
        """One line naming the release and every switch that differs from 0.14."""
        base = VllmProfile()
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name != "version" and getattr(self, f.name) != getattr(base, f.name)
        ]
        return f"vLLM {self.version} profile: " + (", ".join(changed) or "0.14 behaviour")


CHANGES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("0.19", {"reserve_full_isl": True, "full_sequence_check": "can_fit_full_sequence",
              "extra_keys": "mm_offset"}),
    ("0.20", {"swa_admission_cap": "every_check", "gpu_memory_utilization": 0.92}),
    ("0.21", {"full_sequence_check": "allocate_slots", "swa_admission_cap": "full_sequence"}),
    ("0.23", {"free_order": "swa_split", "swa_cache_mask": "mask", "admission_lookahead": True}),
    ("0.24", {"free_order": "lifo_unhashed", "ext_clamp": "any_token", "watermark": 0.0}),
    ("0.26", {"swa_admission_cap_tokens": "max_in_flight_tokens",
              "async_in_flight_swa_free": True}),
    ("0.27", {"free_order": "lifo_cached_only", "draft_padding": "with_running"}),
    ("0.28", {"free_order": "lifo_unhashed"}),
    ("0.29", {"none_hash_seed": "fixed"}),
    ("0.30", {"prefix_cache_retention_interval": 0}),
    ("0.31", {"extra_keys": "tagged", "zero_token_adopt": True, "long_prefill_lone_request": True,
              "max_num_active_seqs_option": True, "async_skip_undelivered_preempted": True}),
    ("0.32", {"cascade_prefix": "zeros"}),
    ("0.33", {"null_block_ref_cnt": "untracked", "priority_self_preemption_continue": True,
              "output_caching": "async_or_spec", "draft_padding": "with_running_or_hit",
              "draft_input_slots": True, "hash_lookahead": True}),
)
"""The release table: (first release, the switches it changed). 0.15-0.18 change nothing."""

_VERSION_RE = re.compile(r"v?(0)\.(\d+)(?:\.\d+)?(?:\S*)?")


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def profile_for(version: str) -> VllmProfile:
    """The profile of release ``version`` ("0.33", "0.33.0" or "v0.33.1": patch ignored).

    Raises:
        ValueError: for a release outside 0.14 ... 0.33, naming the known ones.
    """
    match = _VERSION_RE.fullmatch(version.strip())
    key = f"0.{int(match.group(2))}" if match else None
    if key not in VERSIONS:
        raise ValueError(
            f"unknown vLLM version {version!r}; known: {VERSIONS[0]} ... {VERSIONS[-1]}"
        )
    assert key is not None
    values: dict[str, Any] = {"version": key}
    for release, changes in CHANGES:
        if _minor(release) <= _minor(key):
            values.update(changes)
    return VllmProfile(**values)


DEFAULT_PROFILE = profile_for("0.14")
"""The profile managers use when given none (vLLM 0.14 behaviour)."""


def _parse_value(name: str, text: str) -> Any:
    field_type = {f.name: str(f.type) for f in fields(VllmProfile)}[name]
    lowered = text.strip().lower()
    if "None" in field_type and lowered in ("none", "null", ""):
        return None
    if field_type.startswith("bool"):
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"profile switch {name} takes true or false, got {text!r}")
    try:
        if field_type.startswith("int"):
            return int(text)
        if field_type.startswith("float"):
            return float(text)
    except ValueError:
        raise ValueError(f"profile switch {name} takes a number, got {text!r}") from None
    return text.strip()


def parse_override(text: str) -> tuple[str, Any]:
    """``"NAME=VALUE"`` -> (name, typed value), e.g. ``"zero_token_adopt=false"``.

    Raises:
        ValueError: without ``=``, for an unknown switch or a value of the wrong type.
    """
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep:
        raise ValueError(f"profile override {text!r} is not NAME=VALUE")
    known = [f.name for f in fields(VllmProfile) if f.name != "version"]
    if name not in known:
        raise ValueError(f"unknown profile switch {name!r}; known: {', '.join(known)}")
    return name, _parse_value(name, value)


def apply_overrides(profile: VllmProfile, overrides: Iterable[str]) -> VllmProfile:
    """``profile`` with every ``NAME=VALUE`` override applied, in order."""
    changes = dict(parse_override(text) for text in overrides)
    return profile.replace(**changes) if changes else profile


def distinct_profiles() -> list[VllmProfile]:
    """One profile per distinct set of allocator switches (the releases that first had it)."""
    seen: dict[tuple[Any, ...], VllmProfile] = {}
    for version in VERSIONS:
        profile = profile_for(version)
        key = allocator_switches(profile)
        seen.setdefault(key, profile)
    return list(seen.values())


ALLOCATOR_SWITCHES = (
    "free_order", "null_block_ref_cnt", "extra_keys", "cascade_prefix", "swa_cache_mask",
    "prefix_cache_retention_interval", "ext_clamp", "zero_token_adopt", "none_hash_seed",
    "full_sequence_check", "swa_admission_cap", "watermark", "hash_lookahead",
)
"""The fields the block manager reads (the rest is scheduler and engine data)."""


def allocator_switches(profile: VllmProfile) -> tuple[Any, ...]:
    """The values of :data:`ALLOCATOR_SWITCHES`, in that order."""
    return tuple(getattr(profile, name) for name in ALLOCATOR_SWITCHES)


HASH_LOOKAHEAD_METHODS = ("eagle",)
"""Drafting methods whose hashes look ahead (vLLM: EAGLE, EAGLE-3 and MTP; pagedsim drafts
EAGLE only). Their drafter's KV at a block's last position reads the token after it."""


def num_hash_lookahead_tokens(profile: VllmProfile, spec_method: str | None,
                              enable_caching: bool) -> int:
    """Tokens after each block that its hash covers (vLLM 0.33's ``VllmConfig.
    num_hash_lookahead_tokens``; no KV connector here): 1 for EAGLE with prefix caching on
    under ``hash_lookahead``, else 0. Block hashers take it; so does the KV-cache manager."""
    on = profile.hash_lookahead and enable_caching and spec_method in HASH_LOOKAHEAD_METHODS
    return 1 if on else 0
