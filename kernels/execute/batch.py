"""One logged step as the forward packs it: decodes first, then prefill chunks, then padding.

A sequence with one new token is a decode (paged decode attention); one with more is a prefill
chunk (paged prefill attention over its cached prefix). vLLM pads a batch to its CUDA-graph
capture sizes (`[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`, max 512 by default):
a decode-only batch runs one full graph at the padded size (`mode` "full"; padded sequences
attend to one token of the null block 0); a prefill or mixed batch of at most the largest size
runs piecewise graphs with the linear layers padded (`mode` "piecewise"; attention sees the
real tokens only); a larger batch runs eagerly, unpadded (`mode` "none").

    tokens:  [ decode 0 .. decode D-1 | chunk 0 ... chunk P-1 | padding (slot -1, id 0) ]
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels.validate.log import SeqRecord, StepRecord

MAX_CAPTURE_SIZE = 512


def capture_sizes(max_size: int = MAX_CAPTURE_SIZE) -> list[int]:
    """vLLM's default CUDA-graph capture sizes up to `max_size`."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size]


def padded_size(n: int, sizes: list[int]) -> int | None:
    """Smallest capture size >= n, or None when n is above them all."""
    return next((s for s in sizes if s >= n), None)


@dataclass(slots=True)
class StepBatch:
    """The packed batch of one step (host lists; the engine uploads them)."""

    step: int
    decode: list[SeqRecord]
    prefill: list[SeqRecord]
    mode: str
    padded_tokens: int

    @property
    def num_tokens(self) -> int:
        return len(self.decode) + sum(s.num_new for s in self.prefill)

    @property
    def num_decode_rows(self) -> int:
        """Decode attention rows: the padded batch in a full graph, else the real decodes."""
        return self.padded_tokens if self.mode == "full" else len(self.decode)

    @property
    def seqs(self) -> list[SeqRecord]:
        return self.decode + self.prefill

    def _pad(self, values: list[int], fill: int) -> list[int]:
        return values + [fill] * (self.padded_tokens - len(values))

    def token_ids(self, vocab_size: int) -> list[int]:
        return self._pad([t % vocab_size for s in self.seqs for t in s.token_ids], 0)

    def positions(self) -> list[int]:
        return self._pad([p for s in self.seqs for p in range(s.start, s.end)], 0)

    def slot_mapping(self) -> list[int]:
        return self._pad([slot for s in self.seqs for slot in s.slot_mapping], -1)

    def decode_tables(self) -> list[list[int]]:
        rows = [s.block_table for s in self.decode]
        return rows + [[0]] * (self.num_decode_rows - len(rows))

    def decode_lens(self) -> list[int]:
        lens = [s.end for s in self.decode]
        return lens + [1] * (self.num_decode_rows - len(lens))

    def prefill_starts(self) -> list[int]:
        starts = [0]
        for s in self.prefill:
            starts.append(starts[-1] + s.num_new)
        return starts

    def logits_rows(self) -> list[int]:
        """Rows whose hidden state reaches the LM head: each sequence's last new token."""
        if self.mode == "full":
            return list(range(self.padded_tokens))
        ends = [i + 1 for i in range(len(self.decode))]
        ends += [len(self.decode) + e for e in self.prefill_starts()[1:]]
        return [e - 1 for e in ends]

    def describe(self) -> dict[str, object]:
        """The batch as the output file records it."""
        ctx = [s.start for s in self.decode]
        return {"num_seqs": len(self.seqs), "num_decode": len(self.decode),
                "decode_context_sum": sum(ctx), "decode_context_max": max(ctx, default=0),
                "prefill": [[s.num_new, s.start] for s in self.prefill],
                "num_tokens": self.num_tokens, "padded_tokens": self.padded_tokens,
                "mode": self.mode}


def make_batch(rec: StepRecord, sizes: list[int]) -> StepBatch:
    """Pack `rec`'s sequences (those with no new token are left out) for capture `sizes`."""
    decode = [s for s in rec.seqs if s.num_new == 1]
    prefill = [s for s in rec.seqs if s.num_new > 1]
    batch = StepBatch(rec.step, decode, prefill, "none", 0)
    n = batch.num_tokens
    padded = padded_size(n, sizes)
    if padded is None:
        batch.mode, batch.padded_tokens = "none", n
    else:
        batch.mode, batch.padded_tokens = ("piecewise" if prefill else "full"), padded
    return batch
