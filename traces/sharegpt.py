"""ShareGPT-style JSON conversations, tokenised with a caller-supplied tokenizer.

Following the vLLM serving benchmark, each conversation contributes its first exchange:
the first human message is the prompt and the reply after it sets the output length.
The tokenizer is any callable str -> sequence of ints; nothing is ever downloaded. The
files hold no times, so every request arrives at 0 (re-time the trace to replay it).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from traces.columns import Columns, build_trace
from traces.errors import TraceError
from traces.model import Trace
from traces.rawfile import RawFile, parse_json
from traces.tokens import TokenStore

Tokenizer = Callable[[str], Sequence[int]]


def _first_exchange(conv: Any) -> tuple[str, str] | None:
    turns = conv.get("conversations") if isinstance(conv, dict) else None
    if not isinstance(turns, list):
        return None
    for k in range(len(turns) - 1):
        ask, reply = turns[k], turns[k + 1]
        if (isinstance(ask, dict) and isinstance(reply, dict) and ask.get("from") == "human"
                and isinstance(ask.get("value"), str) and isinstance(reply.get("value"), str)):
            return ask["value"], reply["value"]
    return None


def load_sharegpt(
    raw: RawFile, tokenizer: Tokenizer | None, *, seed: int = 0, sort: bool = False
) -> Trace:
    """Load ShareGPT JSON (a list of {"id", "conversations": [{"from", "value"}]}).

    Raises:
        TraceError: no tokenizer, not a list, or no usable conversation.
    """
    if tokenizer is None:
        raise TraceError(f"{raw.path}: ShareGPT text needs a tokenizer callable "
                         "(load_trace(..., tokenizer=fn)); none is downloaded")
    doc = parse_json(raw)
    if not isinstance(doc, list):
        raise TraceError(f"{raw.path}: expected a JSON array of conversations")
    ids: list[str] = []
    rows: list[int] = []
    prompt_ids: list[np.ndarray[Any, Any]] = []
    outputs: list[int] = []
    for k, conv in enumerate(doc):
        pair = _first_exchange(conv)
        if pair is None:
            continue
        p_ids = np.asarray(tokenizer(pair[0]), dtype=np.int64)
        out = len(tokenizer(pair[1]))
        if p_ids.size == 0 or out == 0:
            continue
        ids.append(str(conv.get("id", k)))
        rows.append(k + 1)
        prompt_ids.append(p_ids)
        outputs.append(out)
    return _build(raw, ids, rows, prompt_ids, outputs, len(doc), seed, sort)


def _build(raw: RawFile, ids: list[str], rows: list[int], prompt_ids: list[Any],
           outputs: list[int], num_rows: int, seed: int, sort: bool) -> Trace:
    if not ids:
        raise TraceError(f"{raw.path}: no conversation has a human message followed by a "
                         "non-empty reply")
    lens = np.array([len(p) for p in prompt_ids], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    size = len(ids)
    cols = Columns("sharegpt", np.zeros(size), lens, np.array(outputs, dtype=np.int64),
                   np.array(rows, dtype=np.int64), "conversations", ids=np.array(ids, np.str_),
                   id_field="id", num_rows=num_rows, num_skipped=num_rows - size,
                   store=TokenStore("explicit", np.concatenate(prompt_ids), offsets),
                   token_src=np.arange(size, dtype=np.int64),
                   notes=[(f"first exchange of each conversation; {num_rows - size} "
                           "skipped (no human message with a reply)"),
                          "no arrival times: all requests arrive at time 0"])
    return build_trace(raw, cols, sort=sort, seed=seed)
