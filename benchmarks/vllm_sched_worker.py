"""vLLM's side of ``vllm_diff.py --scheduler``: its v1 Scheduler on the CPU, fed fake outputs.

Runs in vLLM's interpreter (0.14 ... 0.33); one stream (``vllm_sched_stream.py``) per input
JSON line, its per-step records as the reply line. No model is loaded (a stand-in model
configuration; speculative decoding by ngram, EAGLE or a draft model, the scheduler deriving
lookahead slots and EAGLE's block drop from the method as the engine would). Each step adds its
arrivals, calls ``schedule()`` and answers with a ``ModelRunnerOutput``: a request that caught
up samples its next fixed token plus its accepted drafts (never a placeholder draft, which the
rejection sampler always rejects), a partial prefill nothing. Async
scheduling schedules the next step before the previous step's output is delivered.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import vllm
from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request
from vllm_sched_stream import accepted_drafts, empty_record


class StandInModel:
    """What the scheduler reads of a model configuration, for a text-only decoder: its
    length limit, "generate" runner, and every other flag, predicate or count off."""

    runner_type = "generate"
    architectures = ("LlamaForCausalLM",)
    multimodal_config = None

    def __init__(self, max_model_len: int) -> None:
        self.max_model_len = max_model_len

    def get_multimodal_config(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return Off()


class Off(int):
    """Zero that can also be called (returning zero): an unset flag, count or predicate."""

    def __call__(self, *args: Any, **kwargs: Any) -> int:
        return 0


class SpecStandIn:
    """A speculative configuration for ``method`` (ngram, eagle or draft_model) with K tokens:
    the method predicates the release reads answer for that method (EAGLE drops a prefix
    hit's last block; a draft model's sequential input keeps one extra slot in 0.33's
    budget); every other method predicate, flag or count is off. The scheduler and, from
    0.33, ``VllmConfig``'s lookahead properties derive their fields from these."""

    num_speculative_tokens_per_batch_size = None
    disable_eagle_block_drop = False
    disable_lookahead_block_hashes = False
    disable_padded_drafter_batch = False
    parallel_drafting = False

    def __init__(self, method: str, k: int) -> None:
        self.method = method
        self.num_speculative_tokens = k

    def use_eagle(self) -> bool:
        return self.method == "eagle"

    def uses_draft_model(self) -> bool:
        return self.method == "draft_model"

    def needs_eagle_block_drop(self) -> bool:
        return self.use_eagle()

    def use_eagle_block_drop(self) -> bool:
        return self.use_eagle() and not self.disable_eagle_block_drop

    @property
    def max_num_new_slots_for_drafting(self) -> int:
        return 1 if self.uses_draft_model() else 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return Off()


class NoGrammar:
    """The structured-output manager of a run without structured outputs."""

    def should_advance(self, request: Any, *args: Any, **kwargs: Any) -> bool:
        return False

    def accept_tokens(self, request: Any, token_ids: list[int], *args: Any, **kwargs: Any) -> bool:
        return True

    def validate_tokens(self, request: Any, token_ids: list[int]) -> list[int]:
        return token_ids

    def grammar_bitmask(self, *args: Any, **kwargs: Any) -> None:
        return None


def _kwargs(cls: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    names = set(inspect.signature(cls).parameters)
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in wanted.items() if k in names}


def _overrides(cls: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Fields of ``cls`` set by ``--vllm-scheduler-config``; one this release lacks stops."""
    known = _kwargs(cls, values)
    for name in values.keys() - known.keys():
        raise SystemExit(f"--vllm-scheduler-config {name}: vLLM {vllm.__version__}'s "
                         f"{cls.__name__} has no such field")
    return known


def build_scheduler(config: dict[str, Any]) -> Any:
    """vLLM's v1 scheduler for the stream's configuration (this release's arguments)."""
    sched_config = SchedulerConfig(**_kwargs(SchedulerConfig, {
        "max_num_seqs": config["max_num_seqs"],
        "max_num_batched_tokens": config["max_num_batched_tokens"],
        "max_model_len": config["max_model_len"],
        "enable_chunked_prefill": config["chunked_prefill"],
        "policy": config["policy"],
        "async_scheduling": config["async"],
        "is_encoder_decoder": False,
    }), **_overrides(SchedulerConfig, config.get("vllm_scheduler", {})))
    cache_config = CacheConfig(**_kwargs(CacheConfig, {
        "block_size": config["block_size"], "enable_prefix_caching": config["prefix_caching"]}))
    cache_config.num_gpu_blocks = config["num_blocks"]
    vllm_config = VllmConfig(scheduler_config=sched_config, cache_config=cache_config,
                             device_config=DeviceConfig(device="cpu"))
    object.__setattr__(vllm_config, "model_config", StandInModel(config["max_model_len"]))
    if config["spec"]:
        object.__setattr__(vllm_config, "speculative_config", SpecStandIn(
            config.get("spec_method", "ngram"), config["spec"]))
    bs = config["block_size"]
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8, dtype=torch.float16)
    kv_config = KVCacheConfig(config["num_blocks"], [], [KVCacheGroupSpec(["l0"], spec)])
    cls = AsyncScheduler if config["async"] else Scheduler
    return cls(**_kwargs(Scheduler.__init__, {
        "vllm_config": vllm_config, "kv_cache_config": kv_config,
        "structured_output_manager": NoGrammar(), "block_size": bs, "hash_block_size": bs,
        "log_stats": False}))


def make_hasher(sched: Any, config: dict[str, Any]) -> Any:
    """The engine's request block hasher: from 0.33 its hashes cover the config's lookahead
    tokens after each block (EAGLE's drafter reads the next token), older releases have none."""
    lookahead = getattr(sched.vllm_config, "num_hash_lookahead_tokens", 0)
    extra = (lookahead,) if lookahead else ()
    return kv_cache_utils.get_request_block_hasher(config["block_size"], sha256, *extra)


def make_request(spec: dict[str, Any], hasher: Any) -> Any:
    params = SamplingParams(max_tokens=spec["max_tokens"], ignore_eos=True)
    kwargs: dict[str, Any] = {
        "request_id": spec["id"], "prompt_token_ids": list(spec["prompt"]),
        "sampling_params": params, "pooling_params": None, "eos_token_id": None,
        "arrival_time": spec["arrival"] + int(spec["id"][1:]) * 1e-6,
        "priority": spec["priority"], "block_hasher": hasher,
    }
    return Request(**_kwargs(Request.__init__, kwargs))


class Driver:
    """Steps vLLM's scheduler over one stream and records every step."""

    def __init__(self, stream: dict[str, Any]) -> None:
        self.config = config = stream["config"]
        self.sched = build_scheduler(config)
        self.hasher = make_hasher(self.sched, config) if config["prefix_caching"] else None
        self.specs = {spec["id"]: spec for spec in stream["requests"]}
        self.arrivals: dict[int, list[dict[str, Any]]] = {}
        for spec in stream["requests"]:
            self.arrivals.setdefault(spec["arrival"], []).append(spec)
        self.records: list[dict[str, Any]] = []
        self.drafting: set[str] = set()
        """Requests whose last scheduled step samples (their next drafts are real)."""

    def run(self) -> list[dict[str, Any]]:
        in_flight: tuple[Any, dict[str, Any], dict[str, int]] | None = None
        for step in range(self.config["num_steps"]):
            for spec in self.arrivals.get(step, ()):
                self.sched.add_request(make_request(spec, self.hasher))
            before = [r.request_id for r in self.sched.running]
            out = self.sched.schedule()
            record, samplers = self.observe(out, before)
            self.records.append(record)
            if in_flight is not None:
                self.deliver(*in_flight)
            in_flight = (out, record, samplers)
            if not self.config["async"]:
                self.deliver(*in_flight)
                in_flight = None
        return self.records

    def observe(self, out: Any, before: list[str]) -> tuple[dict[str, Any], dict[str, int]]:
        """The step's record, and the requests that sample (with their drafts scheduled)."""
        sched = self.sched
        record = empty_record()
        record["scheduled"] = [[rid, n] for rid, n in out.num_scheduled_tokens.items()]
        after = [r.request_id for r in sched.running]
        record["admitted"] = [rid for rid in after if rid not in before]
        record["preempted"] = [rid for rid in reversed(before) if rid not in after]
        record["blocks"] = {rid: list(sched.kv_cache_manager.get_block_ids(rid)[0])
                            for rid in after}
        drafts = out.scheduled_spec_decode_tokens
        samplers = {}
        self.drafting.difference_update(record["preempted"])  # preemption drops drafts
        for rid in out.num_scheduled_tokens:
            req = sched.requests[rid]
            if req.num_computed_tokens >= req.num_tokens:
                samplers[rid] = self.real_drafts(rid, drafts.get(rid, ()))
                self.drafting.add(rid)
            else:
                self.drafting.discard(rid)
        return record, samplers

    def real_drafts(self, rid: str, drafts: Any) -> int:
        """Drafts the fake drafter really proposed: synchronously the non-placeholder ones
        (-1 pads a new decode and never matches); under async every draft shows as -1, and
        they are real when the request sampled in its step before (else padding)."""
        if not self.config["async"]:
            return sum(1 for token in drafts if token >= 0)
        return len(drafts) if rid in self.drafting else 0

    def deliver(self, out: Any, record: dict[str, Any], samplers: dict[str, int]) -> None:
        """The fake model's output for a scheduled step; note who finished."""
        sched, seed = self.sched, self.config["seed"]
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            req = sched.requests.get(rid)
            if rid not in samplers or req is None:
                sampled.append([])
                continue
            n = len(req.output_token_ids)
            accepted = accepted_drafts(seed, rid, n, samplers[rid])
            sampled.append(list(self.specs[rid]["outputs"][n:n + accepted + 1]))
        output = ModelRunnerOutput(**_kwargs(ModelRunnerOutput, {
            "req_ids": ids, "req_id_to_index": {rid: i for i, rid in enumerate(ids)},
            "sampled_token_ids": sampled, "logprobs": None, "prompt_logprobs_dict": {},
            "pooler_output": []}))
        live = [rid for rid in ids if rid in sched.requests]  # not finished by the step before
        sched.update_from_output(out, output)
        record["finished"] = [rid for rid in live if rid not in sched.requests]
        k = self.config["spec"]
        if k and not self.config["async"]:
            # drafts only for requests that sampled (a partial prefill's token is discarded)
            self.propose([rid for rid in ids if rid in samplers], k)

    def propose(self, ids: list[str], k: int) -> None:
        """Drafts for the requests that just decoded: their next K fixed outputs."""
        sched = self.sched
        live = [sched.requests[rid] for rid in ids if rid in sched.requests]
        live = [r for r in live if r in sched.running and r.num_tokens - r.num_computed_tokens == 1]
        drafts = [list(self.specs[r.request_id]["outputs"][r.num_output_tokens:
                                                           r.num_output_tokens + k])
                  for r in live]
        sched.update_draft_token_ids(DraftTokenIds([r.request_id for r in live], drafts))


def main() -> None:
    kv_cache_utils.init_none_hash(sha256)
    print(json.dumps({"vllm": vllm.__version__}), flush=True)
    for line in sys.stdin:
        print(json.dumps(Driver(json.loads(line)).run()), flush=True)


if __name__ == "__main__":
    main()
