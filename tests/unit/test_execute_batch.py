"""Packing a step: decodes first, then chunks, padded to vLLM's CUDA-graph capture sizes."""
from __future__ import annotations

from kernels.execute.batch import capture_sizes, make_batch, padded_size
from kernels.validate.log import SeqRecord, StepRecord


def _seq(rid: str, start: int, end: int, table: list[int], bs: int = 4) -> SeqRecord:
    slots = [table[p // bs] * bs + p % bs for p in range(start, end)]
    return SeqRecord(rid, 0, start, end, list(range(start, end)), table, slots)


def _rec(*seqs: SeqRecord) -> StepRecord:
    return StepRecord(7, 1, 0.0, list(seqs), [], [], [], [], {}, [], 0, 0)


def test_capture_sizes_are_vllms() -> None:
    sizes = capture_sizes()
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-3:] == [480, 496, 512]
    assert 248 in sizes and 256 in sizes and 264 not in sizes and len(sizes) == 51
    assert capture_sizes(64)[-1] == 64
    assert [padded_size(n, sizes) for n in (1, 3, 9, 255, 257, 512, 513)] == \
        [1, 4, 16, 256, 272, 512, None]


def test_decode_only_is_a_padded_full_graph() -> None:
    """Padded decode rows attend to one token of the null block and write no slot."""
    b = make_batch(_rec(_seq("a", 5, 6, [3, 4]), _seq("b", 9, 10, [5, 6, 7]),
                        _seq("c", 1, 2, [8])), capture_sizes())
    assert (b.mode, b.num_tokens, b.padded_tokens, b.num_decode_rows) == ("full", 3, 4, 4)
    assert b.decode_lens() == [6, 10, 2, 1]
    assert b.decode_tables() == [[3, 4], [5, 6, 7], [8], [0]]
    assert b.slot_mapping() == [17, 29, 33, -1]
    assert b.positions() == [5, 9, 1, 0] and b.logits_rows() == [0, 1, 2, 3]


def test_mixed_is_piecewise_with_real_attention_rows() -> None:
    """Chunks follow the decodes; only the linear rows are padded; one logit row per seq."""
    b = make_batch(_rec(_seq("p", 4, 9, [1, 2, 3]), _seq("d", 2, 3, [4]),
                        _seq("z", 3, 3, [5])), capture_sizes())
    assert [s.request_id for s in b.seqs] == ["d", "p"]
    assert (b.mode, b.num_tokens, b.padded_tokens, b.num_decode_rows) == ("piecewise", 6, 8, 1)
    assert b.prefill_starts() == [0, 5] and b.logits_rows() == [0, 5]
    assert b.slot_mapping() == [18, 8, 9, 10, 11, 12, -1, -1]
    assert b.describe()["prefill"] == [[5, 4]] and b.describe()["decode_context_sum"] == 2


def test_large_batches_run_unpadded() -> None:
    b = make_batch(_rec(_seq("p", 0, 600, list(range(1, 151)))), capture_sizes())
    assert (b.mode, b.padded_tokens) == ("none", 600)
    assert len(b.token_ids(50)) == 600 and max(b.token_ids(50)) < 50
