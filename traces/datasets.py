"""Synthetic benchmark datasets with the semantics of `vllm bench serve`: random and sonnet.

random (vLLM's RandomDataset): each prompt is a shared random prefix of `prefix_len` tokens
followed by `input_len x (1 +- range_ratio)` tokens of its own (integers uniform on
[floor(input_len (1 - r)), ceil(input_len (1 + r))]); outputs are uniform on
[max(1, floor(output_len (1 - r))), max(1, ceil(output_len (1 + r)))]. vLLM subtracts the
tokenizer's special tokens from input_len; a simulator has none to add, so nothing is taken.

sonnet (vLLM's SonnetDataset, needs a text file, e.g. vLLM's benchmarks/sonnet.txt): each
prompt is an instruction, the file's first lines (the shared prefix of about `prefix_len`
tokens) and lines drawn at random until about `input_len` tokens; prompts longer than
input_len are drawn again; outputs are `output_len` tokens. No chat template is applied.
Both datasets send every request at time 0; an arrival process (arrivals.py) spreads them.
"""
from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np

from traces.distributions import rng_for
from traces.errors import TraceError
from traces.limits import MAX_TOKENS
from traces.model import Trace, TraceMetadata
from traces.prefixes import add_system_prompt
from traces.rawfile import read_raw
from traces.tokenizer import CharEstimate, Tokenizer, describe, encode_all, is_estimate
from traces.tokens import IntArray, TokenStore

SONNET_INSTRUCTION = "Pick as many lines as you can from these poem lines:\n"


def length_bounds(length: int, range_ratio: float, least: int = 0) -> tuple[int, int]:
    """vLLM's sampling interval [floor(length (1 - r)), ceil(length (1 + r))], at least `least`."""
    low = math.floor(length * (1.0 - range_ratio))
    high = math.ceil(length * (1.0 + range_ratio))
    return max(low, least), max(high, least)


def _check_random(num_prompts: int, input_len: int, output_len: int, range_ratio: float,
                  prefix_len: int) -> None:
    checks = [(num_prompts >= 1, f"--num-prompts {num_prompts}: must be >= 1"),
              (0.0 <= range_ratio < 1.0,
               f"--random-range-ratio {range_ratio:g}: must be in [0, 1)"),
              (input_len >= 0, f"--random-input-len {input_len}: must be >= 0"),
              (output_len >= 1, f"--random-output-len {output_len}: must be >= 1"),
              (prefix_len >= 0, f"--random-prefix-len {prefix_len}: must be >= 0")]
    for ok, message in checks:
        if not ok:
            raise TraceError(message)
    low, high = length_bounds(input_len, range_ratio)
    if prefix_len + low < 1:
        raise TraceError(f"--random-input-len {input_len}: with --random-range-ratio "
                         f"{range_ratio:g} and --random-prefix-len {prefix_len} a prompt may "
                         "have 0 tokens; raise --random-input-len or --random-prefix-len")
    if prefix_len + high > MAX_TOKENS or length_bounds(output_len, range_ratio)[1] > MAX_TOKENS:
        raise TraceError(f"--random-input-len / --random-output-len: lengths up to "
                         f"{max(prefix_len + high, output_len):,} tokens exceed the limit of "
                         f"{MAX_TOKENS:,} per request")


def random_dataset(
    num_prompts: int = 1000, input_len: int = 1024, output_len: int = 128,
    range_ratio: float = 0.0, prefix_len: int = 0, *, seed: int = 0, vocab_size: int = 32000,
) -> Trace:
    """vLLM's random dataset: `num_prompts` requests, all arriving at time 0.

    Args:
        num_prompts: number of requests.
        input_len: mean own prompt tokens (after the shared prefix).
        output_len: mean output tokens.
        range_ratio: lengths are uniform within +- this share of the mean, in [0, 1).
        prefix_len: tokens of one random prefix every prompt starts with.
        seed: fixes lengths and token ids.
        vocab_size: token ids fall in [0, vocab_size).

    Raises:
        TraceError: a bad argument, named by its vllm bench serve option.
    """
    _check_random(num_prompts, input_len, output_len, range_ratio, prefix_len)
    rng = rng_for(seed, "random-dataset")
    in_low, in_high = length_bounds(input_len, range_ratio)
    out_low, out_high = length_bounds(output_len, range_ratio, least=1)
    own = rng.integers(in_low, in_high, size=num_prompts, endpoint=True)
    outputs = rng.integers(out_low, out_high, size=num_prompts, endpoint=True)
    note = (f"random dataset: input_len {input_len}, output_len {output_len}, range_ratio "
            f"{range_ratio:g}, prefix_len {prefix_len}, seed {seed}")
    meta = TraceMetadata(format="random", num_rows=num_prompts, notes=(note,))
    if prefix_len == 0:
        return Trace(np.zeros(num_prompts), own, outputs, metadata=meta, seed=seed,
                     vocab_size=vocab_size)
    # A request with no own tokens is all prefix: give the base trace one own token to hold
    # its place, then take it back after the prefix is added.
    base = Trace(np.zeros(num_prompts), np.maximum(own, 1), outputs, metadata=meta,
                 seed=seed, vocab_size=vocab_size)
    shared = add_system_prompt(base, prefix_len, fraction=1.0, num_prompts=1, seed=seed)
    return shared.replace(prompt_lens=own + prefix_len)


def sonnet_dataset(
    path: str | Path, num_prompts: int = 1000, input_len: int = 550, output_len: int = 150,
    prefix_len: int = 200, *, tokenizer: Tokenizer | None = None, seed: int = 0,
) -> Trace:
    """vLLM's sonnet dataset from a text file of poem lines; all requests arrive at 0.

    Raises:
        TraceError: unreadable or empty file, or lengths that cannot be met (the message
            names the --sonnet-* option to change).
    """
    raw = read_raw(path)
    lines = [ln for ln in raw.text.splitlines(keepends=True) if ln.strip()]
    if not lines:
        raise TraceError(f"{raw.path}: no text lines (the sonnet dataset needs a text file)")
    if num_prompts < 1 or output_len < 1 or not 1 <= input_len <= MAX_TOKENS:
        raise TraceError(f"--num-prompts {num_prompts}, --sonnet-input-len {input_len}, "
                         f"--sonnet-output-len {output_len}: must be >= 1 (input <= "
                         f"{MAX_TOKENS:,})")
    tok = tokenizer if tokenizer is not None else CharEstimate()
    base = len(tok(SONNET_INSTRUCTION))
    if input_len <= base:
        raise TraceError(f"--sonnet-input-len {input_len}: must exceed the instruction's "
                         f"{base} tokens")
    avg = float(np.mean([len(ids) for ids in encode_all(tok, lines)]))
    num_lines = max(round((input_len - base) / avg), 0)
    prefix = lines[:max(round((prefix_len - base) / avg), 0)]
    prompts = _sonnet_prompts(lines, prefix, num_lines - len(prefix), num_prompts,
                              input_len, tok, random.Random(seed))
    if prompts is None:
        raise TraceError(f"{raw.path}: random lines keep giving prompts over "
                         f"--sonnet-input-len {input_len} tokens; raise it or lower "
                         "--sonnet-prefix-len")
    return _sonnet_trace(raw.path, raw.sha256, prompts, output_len, tok, seed,
                         f"sonnet dataset: {len(lines)} lines, {len(prefix)} prefix lines, "
                         f"{num_lines - len(prefix)} drawn, seed {seed}")


def _sonnet_prompts(lines: list[str], prefix: list[str], num_drawn: int, wanted: int,
                    input_len: int, tok: Tokenizer, rng: random.Random) -> list[IntArray] | None:
    """Token ids of `wanted` prompts of at most input_len tokens (None after many misses)."""
    head = SONNET_INSTRUCTION + "".join(prefix)
    prompts: list[IntArray] = []
    attempts = 20 * wanted + 100
    while len(prompts) < wanted and attempts > 0:
        batch = [head + "".join(rng.choices(lines, k=max(num_drawn, 0)))
                 for _ in range(min(wanted - len(prompts), attempts))]
        attempts -= len(batch)
        prompts += [ids for ids in encode_all(tok, batch) if len(ids) <= input_len]
    return prompts[:wanted] if len(prompts) >= wanted else None


def _sonnet_trace(source: Path, sha256: str, prompts: list[IntArray], output_len: int,
                  tok: Tokenizer, seed: int, note: str) -> Trace:
    lens = np.array([len(p) for p in prompts], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    meta = TraceMetadata(source=str(source), format="sonnet", num_rows=len(prompts),
                         sha256=sha256, notes=(note, f"token counts: {describe(tok)}"),
                         tokenizer=describe(tok), tokens_estimated=is_estimate(tok))
    store = TokenStore("explicit", np.concatenate(prompts), offsets)
    return Trace(np.zeros(len(prompts)), lens, np.full(len(prompts), output_len), metadata=meta,
                 seed=seed, store=store, token_src=np.arange(len(prompts)))
