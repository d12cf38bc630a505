"""ShareGPT-style JSON conversations, as vLLM's serving benchmark reads them.

A record is `{"id", "conversations": [{"from", "value"}, ...]}`; as in vLLM, its first two
turns are the prompt and the completion, whose token count sets the output length. Tokens
come from a tokenizer (`traces.tokenizer.load_tokenizer`, or any str -> ids callable) or,
without one, from the character estimate, which the metadata records. The files hold no
times: every request arrives at 0 until an arrival process re-times the trace.

`load_sharegpt` replays every usable record in file order (the `sharegpt` trace format);
`sharegpt_dataset` samples like `vllm bench serve --dataset-name sharegpt`.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from traces.columns import Columns, build_trace
from traces.errors import TraceError
from traces.limits import MAX_TOKENS
from traces.model import Trace
from traces.rawfile import RawFile, parse_json, read_raw
from traces.tokenizer import (
    CharEstimate,
    Tokenizer,
    describe,
    encode_all,
    is_estimate,
    vocab_size_of,
)
from traces.tokens import IntArray, TokenStore

# vLLM's is_valid_sequence defaults for ShareGPT sampling
MIN_LEN = 4
MAX_PROMPT_LEN = 1024
MAX_TOTAL_LEN = 2048


@dataclass(frozen=True, slots=True)
class Exchange:
    """One record's prompt and completion text, with its id and 1-based record number."""

    request_id: str
    record: int
    prompt: str
    completion: str


def read_exchanges(raw: RawFile) -> tuple[list[Exchange], int]:
    """Records with at least two text turns, in file order, and the number of records.

    Raises:
        TraceError: the file is not a JSON array.
    """
    doc = parse_json(raw)
    if not isinstance(doc, list):
        raise TraceError(f"{raw.path}: expected a JSON array of conversations")
    found = []
    for k, rec in enumerate(doc):
        turns = rec.get("conversations") if isinstance(rec, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        ask, reply = turns[0], turns[1]
        texts = [t.get("value") if isinstance(t, dict) else None for t in (ask, reply)]
        if isinstance(texts[0], str) and isinstance(texts[1], str):
            found.append(Exchange(str(rec.get("id", k)), k + 1, texts[0], texts[1]))
    return found, len(doc)


def load_sharegpt(
    raw: RawFile, tokenizer: Tokenizer | None, *, seed: int = 0, sort: bool = False
) -> Trace:
    """Every record with a non-empty prompt and completion, in file order.

    Raises:
        TraceError: not a JSON array, or no usable conversation.
    """
    tok = tokenizer if tokenizer is not None else CharEstimate()
    exchanges, num_rows = read_exchanges(raw)
    prompts = encode_all(tok, [e.prompt for e in exchanges])
    outputs = [len(ids) for ids in encode_all(tok, [e.completion for e in exchanges])]
    keep = [k for k in range(len(exchanges)) if len(prompts[k]) and outputs[k]]
    return _build(raw, [exchanges[k] for k in keep], [prompts[k] for k in keep],
                  [outputs[k] for k in keep], num_rows, tok, seed, sort,
                  "first two turns of each record, in file order")


def sharegpt_dataset(
    path: str | Path, num_prompts: int = 1000, *, tokenizer: Tokenizer | None = None,
    output_len: int | None = None, seed: int = 0, shuffle: bool = True,
) -> Trace:
    """`num_prompts` requests sampled from a ShareGPT file as vLLM's ShareGPTDataset does.

    Records with two or more turns are shuffled (Python's `random` seeded with `seed`, the
    same permutation vLLM draws), then taken in order while prompt >= 4, completion >= 4
    (unless `output_len` fixes it), prompt <= 1024 and prompt + output <= 2048 tokens. If
    too few qualify, accepted ones are repeated (drawn at random) up to `num_prompts`.

    Raises:
        TraceError: unreadable file, bad arguments, or no record qualifies.
    """
    if num_prompts < 1 or (output_len is not None and output_len < 1):
        raise TraceError(f"--num-prompts ({num_prompts}) and --sharegpt-output-len "
                         f"({output_len}) must be >= 1")
    raw = read_raw(path)
    tok = tokenizer if tokenizer is not None else CharEstimate()
    exchanges, num_rows = read_exchanges(raw)
    if shuffle:
        random.Random(seed).shuffle(exchanges)
    picked, prompts, outputs = _take_valid(exchanges, num_prompts, tok, output_len)
    if not picked:
        raise TraceError(f"{raw.path}: no conversation qualifies (prompt of {MIN_LEN}-"
                         f"{MAX_PROMPT_LEN} tokens, completion >= {MIN_LEN}, total <= "
                         f"{MAX_TOTAL_LEN})")
    note = f"sampled as vLLM's ShareGPT dataset (seed {seed}, shuffle {shuffle})"
    if len(picked) < num_prompts:
        chooser = random.Random(seed)
        extra = [chooser.randrange(len(picked)) for _ in range(num_prompts - len(picked))]
        note += f"; {len(extra)} repeated to reach {num_prompts}"
        picked += [picked[k] for k in extra]
        prompts += [prompts[k] for k in extra]
        outputs += [outputs[k] for k in extra]
    named = [Exchange(str(k), e.record, e.prompt, e.completion) for k, e in enumerate(picked)]
    return _build(raw, named, prompts, outputs, num_rows, tok, seed, False, note)


def _take_valid(
    exchanges: list[Exchange], wanted: int, tok: Tokenizer, output_len: int | None
) -> tuple[list[Exchange], list[IntArray], list[int]]:
    """The first `wanted` exchanges passing vLLM's length filter, tokenised in chunks."""
    picked: list[Exchange] = []
    prompts: list[IntArray] = []
    outputs: list[int] = []
    start, chunk = 0, max(64, wanted)
    while len(picked) < wanted and start < len(exchanges):
        part = exchanges[start:start + chunk]
        start += chunk
        p_ids = encode_all(tok, [e.prompt for e in part])
        c_lens = [len(c) for c in encode_all(tok, [e.completion for e in part])]
        for ex, ids, c_len in zip(part, p_ids, c_lens, strict=True):
            out = c_len if output_len is None else output_len
            too_short = len(ids) < MIN_LEN or (output_len is None and out < MIN_LEN)
            if too_short or len(ids) > MAX_PROMPT_LEN or len(ids) + out > MAX_TOTAL_LEN:
                continue
            picked.append(ex)
            prompts.append(ids)
            outputs.append(out)
            if len(picked) == wanted:
                break
    return picked, prompts, outputs


def _build(raw: RawFile, exchanges: list[Exchange], prompt_ids: list[IntArray],
           outputs: list[int], num_rows: int, tok: Tokenizer, seed: int, sort: bool,
           how: str) -> Trace:
    if not exchanges:
        raise TraceError(f"{raw.path}: no conversation has two turns with a non-empty prompt "
                         "and completion")
    lens = np.array([len(p) for p in prompt_ids], dtype=np.int64)
    out = np.array(outputs, dtype=np.int64)
    _check_lengths(raw, exchanges, lens, out)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    size = len(exchanges)
    skipped = max(num_rows - len({e.record for e in exchanges}), 0)
    cols = Columns("sharegpt", np.zeros(size), lens, out,
                   np.array([e.record for e in exchanges], dtype=np.int64), "conversations",
                   ids=np.array([e.request_id for e in exchanges], np.str_), id_field="id",
                   num_rows=num_rows, num_skipped=skipped,
                   store=TokenStore("explicit", np.concatenate(prompt_ids), offsets),
                   token_src=np.arange(size, dtype=np.int64),
                   notes=[f"{how}; {skipped} records unused",
                          "no arrival times: all requests arrive at time 0"])
    trace = build_trace(raw, cols, sort=sort, seed=seed)
    meta = trace.metadata.with_note(f"token counts: {describe(tok)}", tokenizer=describe(tok),
                                    tokens_estimated=is_estimate(tok))
    return trace.replace(metadata=meta, vocab_size=vocab_size_of(tok))


def _check_lengths(raw: RawFile, exchanges: list[Exchange], lens: Any, out: Any) -> None:
    for name, values in (("prompt", lens), ("completion", out)):
        big = np.flatnonzero(values > MAX_TOKENS)
        if big.size:
            k = int(big[0])
            raise TraceError(f"{raw.path}:{exchanges[k].record}: field 'conversations': "
                             f"{name} of {values[k]:,} tokens is too large (at most "
                             f"{MAX_TOKENS:,} per request)")
