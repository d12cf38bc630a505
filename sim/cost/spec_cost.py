"""Speculative decoding's settings and what its drafter adds to a step's time.

``SpecConfig`` is ``--speculative-config`` read as vLLM spells it (``method``,
``num_speculative_tokens``, and for ``draft_model`` the draft ``model``). The drafter's time
per step: ``draft_model`` runs K one-token forwards of the draft model over the decoding
requests, ``eagle`` K forwards of a head the size of one target layer plus its LM head, and
``ngram`` a CPU lookup per decoding request (``NGRAM_CPU_S``). The time is added to the
step's ``overhead_s``.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass

from sim.cost.gpus import GpuSpec
from sim.cost.models import ModelConfig, get_model
from sim.cost.step_extras import Extras
from sim.cost.step_model import make_step_model

SPEC_METHODS = ("ngram", "eagle", "draft_model")
"""The drafting methods simulated (vLLM's ``method`` values)."""
NGRAM_CPU_S = 20e-6
"""Seconds of CPU time per decoding request for one n-gram proposal: an assumption of the
order of vLLM's numba KMP match over a few thousand tokens of history, not a measurement."""
DRAFT_PRESET = ModelConfig(
    name="llama-68m", num_layers=2, hidden_size=768, num_heads=12, num_kv_heads=12,
    head_dim=64, intermediate_size=3072, vocab_size=32000, dtype="fp16",
    num_params=68_030_208, max_context_len=2048)
"""The default draft model: the shape of the 68M-parameter Llama-architecture draft model
often paired with Llama-2 (2 layers, hidden 768)."""


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """One speculative-decoding setup: ``method`` drafts ``num_speculative_tokens`` (K)
    tokens per decoding request per step; ``model`` names the draft model (draft_model)."""

    method: str
    num_speculative_tokens: int
    model: str | None = None

    @property
    def k(self) -> int:
        return self.num_speculative_tokens


def parse_spec_config(text: str) -> SpecConfig:
    """``--speculative-config`` JSON; ValueError with one line saying what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"is not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(data, dict):
        raise ValueError("must be a JSON object")  # noqa: TRY004 (bad input, one line)
    method = data.get("method")
    if method not in SPEC_METHODS:
        raise ValueError(f"method {method!r} is not one of {', '.join(SPEC_METHODS)}")
    k = data.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {k!r}")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be a string, got {model!r}")
    unknown = sorted(set(data) - {"method", "num_speculative_tokens", "model"})
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}")
    return SpecConfig(method, k, model)


def parse_acceptance(text: str, k: int) -> tuple[float, ...]:
    """``--acceptance-rate``: one probability for every position, or K of them."""
    try:
        rates = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"{text!r} is not a number or a comma-separated list") from None
    if len(rates) not in (1, k):
        raise ValueError(f"gives {len(rates)} rates; give one or num_speculative_tokens ({k})")
    if not all(0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"rates must be in [0, 1], got {text!r}")
    return rates if len(rates) == k else rates * k


def draft_model_config(spec: SpecConfig) -> ModelConfig:
    """The draft model of ``draft_model`` (its ``model`` field, else ``DRAFT_PRESET``)."""
    if spec.model is None or spec.model.lower() == DRAFT_PRESET.name:
        return DRAFT_PRESET
    return get_model(spec.model)


def eagle_head(model: ModelConfig) -> ModelConfig:
    """An EAGLE head for ``model``: one decoder layer of its shape plus the LM head."""
    per_layer = model.num_params // model.num_layers
    return dataclasses.replace(model, name=f"{model.name}-eagle-head", num_layers=1,
                               num_params=per_layer + model.vocab_size * model.hidden_size)


DraftTime = Callable[[int, int], float]
"""Drafter seconds for (decoding requests, sum of their contexts)."""


def make_draft_time(spec: SpecConfig, model: ModelConfig, gpu: GpuSpec, tp: int,
                    kv_cache_dtype: str = "auto") -> DraftTime:
    """The drafter's time per step for this setup (draft forwards priced by the roofline
    model, whatever the target's step model)."""
    k = spec.k
    if spec.method == "ngram":
        return lambda num_reqs, context: num_reqs * NGRAM_CPU_S
    drafter = eagle_head(model) if spec.method == "eagle" else draft_model_config(spec)
    heads_tp = tp if drafter.num_kv_heads % tp == 0 and drafter.num_heads % tp == 0 else 1
    # GPU time only: the step's CPU side is counted once, in the target's step
    forward = make_step_model("roofline", drafter, gpu, heads_tp, kv_cache_dtype=kv_cache_dtype,
                              extras=Extras(cpu_overhead_s=0.0, cpu_per_seq_s=0.0))

    def draft_time(num_reqs: int, context: int) -> float:
        if num_reqs == 0:
            return 0.0
        return k * forward.predict_split(num_reqs, context, ()).total_s
    return draft_time
