"""The requests of bench_allocator.py's stream: (prompt, output) lengths from the Azure
conversation trace or a seeded stand-in, and seeded prompts over a 32,000-token vocabulary,
even requests sharing one 512-token system prompt."""
from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

VOCAB_SIZE = 32_000
SYSTEM_PROMPT_LEN = 512


def load_rows(path: Path, num_rows: int) -> list[tuple[int, int]]:
    """(ContextTokens, GeneratedTokens) of the first ``num_rows`` rows of an Azure trace CSV."""
    rows = []
    with path.open(newline="") as f:
        for line_no, row in enumerate(csv.DictReader(f), start=2):
            if len(rows) == num_rows:
                break
            try:
                rows.append((int(row["ContextTokens"]), int(row["GeneratedTokens"])))
            except (KeyError, TypeError, ValueError):
                sys.exit(f"{path}:{line_no}: bad ContextTokens/GeneratedTokens row: {row}")
    return rows


def synthetic_rows(num_rows: int, seed: int) -> list[tuple[int, int]]:
    """Seeded stand-in for the conversation trace (similar means: ~1,100 in, ~260 out)."""
    rng = random.Random(seed)
    return [
        (min(8000, max(2, int(rng.lognormvariate(6.6, 0.8)))), rng.randint(12, 520))
        for _ in range(num_rows)
    ]


def build_prompts(rows: list[tuple[int, int]], seed: int) -> list[list[int]]:
    """Uniform random prompts; even requests share one 512-token system prompt."""
    rng = random.Random(seed)
    vocab = range(VOCAB_SIZE)
    system_prompt = rng.choices(vocab, k=SYSTEM_PROMPT_LEN)
    prompts = []
    for i, (context_tokens, _) in enumerate(rows):
        body = rng.choices(vocab, k=context_tokens)
        prompts.append(system_prompt + body if i % 2 == 0 else body)
    return prompts
