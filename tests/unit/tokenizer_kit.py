"""Tiny Hugging Face tokenizers built by the tests themselves (tokenizers' trainers), saved
as tokenizer.json files, so no test ever downloads one."""
from __future__ import annotations

from pathlib import Path

import tokenizers

CORPUS = ["the cat sat on the mat", "a dog ran far", "the dog sat"]


def word_level(dest: Path) -> Path:
    """A tiny WordLevel tokenizer (whitespace words) saved as dest/tokenizer.json."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    tok.train_from_iterator(CORPUS, trainer=trainer)
    dest.mkdir(parents=True, exist_ok=True)
    tok.save(str(dest / "tokenizer.json"))
    return dest / "tokenizer.json"


def bpe(dest: Path) -> Path:
    """A tiny byte-level BPE tokenizer saved as dest/tokenizer.json."""
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["[UNK]"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 5, trainer=trainer)
    dest.mkdir(parents=True, exist_ok=True)
    tok.save(str(dest / "tokenizer.json"))
    return dest / "tokenizer.json"
