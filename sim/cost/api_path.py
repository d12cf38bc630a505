"""The per-request path outside the engine: API server, tokenisation, output delivery.

vLLM's API server parses the request, tokenises the prompt and sends it over ZMQ to the engine
core; outputs come back over ZMQ, are detokenised and streamed. A request sent at t joins the
waiting queue at ``t + input_s + per_token_s x prompt`` (in send order: one event loop) and
each token reaches the client ``output_s`` after its step: TTFT and E2EL grow, TPOT and ITL do
not, and a ``--max-concurrency`` slot frees at the last token. A prediction; defaults and
sources: benchmarks/RESULTS.md, "Against public vLLM runs".
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Derived from issue 17's comparison with 25 public vLLM 0.15 runs at light load: TTFT was a
# steady ~24 ms short on H100 with the engine steps priced. Of that, ~1 ms is the prompt's
# tokenisation (an assumed ~500-token prompt at 2 us), 12 ms the way in and 11 ms the way out
# (how the fixed 23 ms splits between the two is not measured).
DEFAULT_API_OVERHEAD_MS = 12.0
DEFAULT_API_OUTPUT_MS = 11.0
# Per prompt token, beyond a call's fixed cost (in the fixed part): HF tokenizers' Rust encoder
# on one CPU core. tt-inference-server#2173 measured 10-21 us/token for a 131-token chat
# prompt, fixed cost and chat template included (~1.3 ms a call).
DEFAULT_TOKENIZE_US_PER_TOKEN = 2.0
API_PATH_STEP_MODELS = ("auto", "fit", "calibrated")
"""Step-model kinds that get the path by default (explicit roofline, poly and table runs
price the engine alone unless a path option is given)."""


@dataclass(frozen=True, slots=True)
class ApiPath:
    """Seconds outside the engine; all zero when the path is off."""

    input_s: float = 0.0
    per_token_s: float = 0.0
    output_s: float = 0.0

    def __post_init__(self) -> None:
        if min(self.input_s, self.per_token_s, self.output_s) < 0:
            raise ValueError(f"API path terms must be >= 0, got {self}")

    @property
    def on(self) -> bool:
        return bool(self.input_s or self.per_token_s or self.output_s)

    def inbound_s(self, prompt_tokens: int) -> float:
        """From the send to the waiting queue, for a prompt of `prompt_tokens`."""
        return self.input_s + self.per_token_s * prompt_tokens

    def entry(self, send: float, prompt_tokens: int, previous: float) -> float:
        """When a request sent at `send` joins the waiting queue: after its inbound path,
        and never before `previous`, the entry of the request sent before it."""
        return max(send + self.inbound_s(prompt_tokens), previous)

    def describe(self) -> str:
        if not self.on:
            return "API path off"
        return (f"API path {self.input_s * 1e3:g} ms + {self.per_token_s * 1e6:g} us/prompt "
                f"token in, {self.output_s * 1e3:g} ms out (a prediction)")

    def as_dict(self) -> dict[str, float]:
        return {"api_overhead_ms": self.input_s * 1e3,
                "tokenize_us_per_token": self.per_token_s * 1e6,
                "api_output_ms": self.output_s * 1e3}


def api_path_of(cost: Any) -> ApiPath:
    """The path a CostConfig asks for (its ``api_overhead_ms``, ``tokenize_us_per_token`` and
    ``api_output_ms``)."""
    return ApiPath(cost.api_overhead_ms * 1e-3, cost.tokenize_us_per_token * 1e-6,
                   cost.api_output_ms * 1e-3)


def resolve_api_path(step_model: str, switch: bool | None, input_ms: float | None,
                     tokenize_us: float | None, output_ms: float | None) -> ApiPath:
    """The command line's path: off with `switch` False; on with True, with any value given,
    or (None) for the step models in API_PATH_STEP_MODELS; defaults for values not given."""
    given = (input_ms, tokenize_us, output_ms)
    kind = step_model.strip().partition(":")[0].strip().lower()
    on = switch if switch is not None else (
        any(v is not None for v in given) or kind in API_PATH_STEP_MODELS)
    if not on:
        return ApiPath()
    defaults = (DEFAULT_API_OVERHEAD_MS, DEFAULT_TOKENIZE_US_PER_TOKEN, DEFAULT_API_OUTPUT_MS)
    ms_in, us_tok, ms_out = (d if v is None else v for v, d in zip(given, defaults))
    return ApiPath(ms_in * 1e-3, us_tok * 1e-6, ms_out * 1e-3)


def entry_times(sends: Sequence[float], prompts: Sequence[int], path: ApiPath) -> list[float]:
    """When each request sent at `sends` (in order) joins the waiting queue: after its
    inbound path, and never before the request sent before it."""
    out: list[float] = []
    last = float("-inf")
    for send, prompt in zip(sends, prompts):
        last = path.entry(send, prompt, last)
        out.append(last)
    return out
