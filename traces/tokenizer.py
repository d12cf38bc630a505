"""Counting and identifying the tokens of text datasets (ShareGPT, sonnet).

`load_tokenizer(path)` reads a local Hugging Face `tokenizer.json` (the file itself, or a
directory holding one) through the optional `tokenizers` package, imported only here and only
when a tokenizer is asked for; nothing is ever downloaded. Without a tokenizer, `CharEstimate`
stands in: one token per 4 characters, rounded up (the usual rule of thumb for English text),
each id a hash of its 4-character chunk, so equal texts get equal ids and a shared leading
text gives a shared id prefix. Traces built on the estimate record it in their metadata.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from traces.errors import TraceError
from traces.tokens import _GOLDEN, IntArray, key_of, mix64

Tokenizer = Callable[[str], "Sequence[int] | IntArray"]
"""Anything that turns a text into its token ids."""
INSTALL_HINT = 'pip install -e ".[tokenizer]"'
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True, eq=False)
class HFTokenizer:
    """A Hugging Face `tokenizers.Tokenizer` read from a local tokenizer.json.

    Encodes with the tokenizer's special tokens (a BOS token, for most models), as vLLM's
    benchmark datasets count prompt and completion lengths.
    """

    backend: Any
    path: Path

    def __call__(self, text: str) -> list[int]:
        return list(self.backend.encode(text).ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Ids of many texts at once (the Rust side runs them in parallel)."""
        return [list(e.ids) for e in self.backend.encode_batch(texts)]

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size())

    @property
    def description(self) -> str:
        return f"tokenizer {self.path}"


@dataclass(frozen=True, slots=True)
class CharEstimate:
    """Token ids without a tokenizer: one id per `CHARS_PER_TOKEN` characters (rounded up)."""

    vocab_size: int = 32000

    def __call__(self, text: str) -> IntArray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        count = -(-len(codes) // CHARS_PER_TOKEN)
        flat = np.zeros(count * CHARS_PER_TOKEN, dtype=np.uint64)
        flat[:len(codes)] = codes
        chunks = flat.reshape(count, CHARS_PER_TOKEN)
        weights = np.arange(1, CHARS_PER_TOKEN + 1, dtype=np.uint64) * _GOLDEN
        mixed = mix64(mix64(chunks * weights + _SALT).sum(axis=1, dtype=np.uint64))
        return (mixed % np.uint64(self.vocab_size)).astype(np.int64)

    @property
    def description(self) -> str:
        return (f"estimated: {CHARS_PER_TOKEN} characters per token (no tokenizer; give "
                "--tokenizer PATH for exact counts)")


_SALT = key_of(0, "char-estimate")


def load_tokenizer(path: str | Path) -> HFTokenizer:
    """A local tokenizer.json (a file, or a directory holding one); never downloads.

    Raises:
        TraceError: the path holds no tokenizer.json, the file is not a tokenizer, or the
            optional `tokenizers` package is missing (the message names the extra to install).
    """
    given = Path(path)
    file = given / "tokenizer.json" if given.is_dir() else given
    if not file.is_file():
        where = f"{given} holds no tokenizer.json" if given.is_dir() else f"{given}: no such file"
        raise TraceError(f"--tokenizer {where} (give a local tokenizer.json or the directory "
                         "holding it; nothing is downloaded)")
    try:
        from tokenizers import Tokenizer as Backend
    except ImportError:
        raise TraceError(f"--tokenizer needs the optional 'tokenizers' package: "
                         f"{INSTALL_HINT}") from None
    try:
        backend = Backend.from_file(str(file))
    except Exception as exc:  # noqa: BLE001 (the Rust side raises plain Exception)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceError(f"{file}: not a Hugging Face tokenizer.json ({first})") from None
    return HFTokenizer(backend, file)


def encode_all(tokenizer: Tokenizer, texts: list[str]) -> list[IntArray]:
    """Token ids of every text, batched when the tokenizer can batch."""
    batch = getattr(tokenizer, "encode_batch", None)
    encoded = batch(texts) if callable(batch) else [tokenizer(t) for t in texts]
    return [np.asarray(ids, dtype=np.int64) for ids in encoded]


def describe(tokenizer: Tokenizer) -> str:
    """What counted the tokens, for a trace's metadata."""
    text = getattr(tokenizer, "description", None)
    return text if isinstance(text, str) else "caller's tokenizer"


def is_estimate(tokenizer: Tokenizer) -> bool:
    """True when token counts are the character estimate."""
    return isinstance(tokenizer, CharEstimate)


def vocab_size_of(tokenizer: Tokenizer, default: int = 32000) -> int:
    """The tokenizer's vocabulary size, or `default` when it does not say."""
    size = getattr(tokenizer, "vocab_size", None)
    return int(size) if isinstance(size, int) and size > 0 else default
