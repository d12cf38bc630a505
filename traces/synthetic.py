"""Seeded synthetic workloads for what public traces lack.

Arrivals come from a Poisson or Gamma process, lengths from `distributions.LengthDist`.
Presets use the mean lengths the PagedAttention paper reports for its datasets (OPT
tokenizer): ShareGPT 161 prompt / 338 output tokens, Alpaca 19 / 58. Only the means are
published; the lognormal spreads below are this project's choice. `default_workload` is
what simulate.py replays when it is given no trace; it needs no files.
"""
from __future__ import annotations

from traces.distributions import LengthDist, gamma_arrivals, lognormal, rng_for
from traces.model import Trace, TraceMetadata
from traces.prefixes import add_system_prompt, multi_turn

SHAREGPT_PROMPT = lognormal(161, sigma=1.0)
SHAREGPT_OUTPUT = lognormal(338, sigma=0.9)
ALPACA_PROMPT = lognormal(19, sigma=0.6)
ALPACA_OUTPUT = lognormal(58, sigma=0.8)


def synthetic(
    num_requests: int, rate: float, prompt: LengthDist, output: LengthDist, *,
    cv: float = 1.0, seed: int = 0, name: str = "synthetic",
) -> Trace:
    """`num_requests` requests with Gamma arrivals (cv = 1: Poisson) at `rate` per second.

    Args:
        num_requests: number of requests.
        rate: mean arrival rate (requests/s).
        prompt: prompt length distribution.
        output: output length distribution.
        cv: coefficient of variation of inter-arrival gaps.
        seed: fixes every draw; the same arguments always give the same trace.
        name: format name recorded in the metadata.
    """
    arrivals = gamma_arrivals(num_requests, rate, cv, rng=rng_for(seed, "arrivals"))
    prompts = prompt.sample(num_requests, rng_for(seed, "prompt"))
    outputs = output.sample(num_requests, rng_for(seed, "output"))
    meta = TraceMetadata(format=name, num_rows=num_requests,
                         notes=(f"{name}: rate {rate:g}/s, cv {cv:g}, seed {seed}",))
    return Trace(arrivals, prompts, outputs, metadata=meta, seed=seed)


def sharegpt_like(
    num_requests: int = 1000, rate: float = 2.0, *, cv: float = 1.0, seed: int = 0
) -> Trace:
    """ShareGPT-like lengths (means 161 / 338 tokens)."""
    return synthetic(num_requests, rate, SHAREGPT_PROMPT, SHAREGPT_OUTPUT, cv=cv, seed=seed,
                     name="sharegpt-like")


def alpaca_like(
    num_requests: int = 1000, rate: float = 10.0, *, cv: float = 1.0, seed: int = 0
) -> Trace:
    """Alpaca-like lengths (means 19 / 58 tokens)."""
    return synthetic(num_requests, rate, ALPACA_PROMPT, ALPACA_OUTPUT, cv=cv, seed=seed,
                     name="alpaca-like")


def shared_prefix(
    num_requests: int = 1000, rate: float = 2.0, *, prefix_len: int = 512,
    num_prefixes: int = 4, fraction: float = 1.0, seed: int = 0,
) -> Trace:
    """ShareGPT-like requests, a `fraction` of which start with one of `num_prefixes`
    shared system prompts of `prefix_len` tokens."""
    base = sharegpt_like(num_requests, rate, seed=seed)
    return add_system_prompt(base, prefix_len, fraction, num_prefixes, seed=seed)


def multi_turn_chat(
    num_requests: int = 1000, rate: float = 2.0, *, turns: int | LengthDist = 4,
    think_time_s: float = 20.0, seed: int = 0,
) -> Trace:
    """ShareGPT-like conversations of `turns` turns sharing their history as prefix."""
    base = sharegpt_like(num_requests, rate, seed=seed)
    return multi_turn(base, turns, think_time_s, seed=seed)


def default_workload(seed: int = 0) -> Trace:
    """The built-in workload: 1,000 ShareGPT-like requests, Poisson at 12 req/s (~80 s),
    half of them opening with one of 4 shared 128-token system prompts.

    The rate is chosen so that, with simulate.py's defaults (Llama-2-7B on an A100-80GB),
    contiguous Max reservation runs out of KV memory while paging does not: the default
    run shows the PagedAttention effect instead of an idle server.
    """
    base = sharegpt_like(1000, 12.0, seed=seed)
    trace = add_system_prompt(base, 128, fraction=0.5, num_prompts=4, seed=seed)
    return trace.replace(metadata=trace.metadata.with_note("pagedsim default workload",
                                                           format="default"))
