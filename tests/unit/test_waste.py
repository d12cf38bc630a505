"""Unit tests for the memory-waste breakdown helpers and the worked examples in waste.py."""
from __future__ import annotations

import pytest

from allocator.contiguous import ContiguousManager
from allocator.request import Request
from allocator.waste import final_kv_slots, split_free, split_held, true_output_len


def make_request(prompt_len: int, final_output_len: int | None, max_tokens: int = 4096) -> Request:
    return Request("r", range(prompt_len), max_tokens, final_output_len=final_output_len)


def test_true_output_len_caps() -> None:
    """The true output is final_output_len capped by max_tokens and max_model_len - prompt."""
    assert true_output_len(make_request(10, 25), 2048) == 25
    assert true_output_len(make_request(10, 25, max_tokens=5), 2048) == 5
    assert true_output_len(make_request(2040, 25), 2048) == 8
    assert true_output_len(make_request(10, None, max_tokens=9), 2048) == 9


def test_final_kv_slots_skips_the_last_sampled_token() -> None:
    """Prompt 5 and output 6 write 10 slots; an empty output still writes the prompt."""
    assert final_kv_slots(make_request(5, 6), 2048) == 10
    assert final_kv_slots(make_request(5, 0), 2048) == 5
    assert final_kv_slots(make_request(5, 1), 2048) == 5


def test_split_held_fig3() -> None:
    """Fig. 3: a 2048-slot holding that ends with 10 tokens leaves 2038 internal."""
    assert split_held(2048, 10, 10) == (10, 0, 2038)
    assert split_held(512, 5, 5) == (5, 0, 507)


def test_split_held_reserved_and_overrun() -> None:
    """Unwritten slots up to the final length are reserved; writing past it reserves none."""
    assert split_held(16, 8, 10) == (8, 2, 6)
    assert split_held(16, 12, 10) == (12, 0, 4)
    assert split_held(16, 0, 40) == (0, 16, 0)
    with pytest.raises(ValueError):
        split_held(16, 17, 20)


def test_split_free() -> None:
    """Free slots split into cached, outside the largest run, and the largest run."""
    assert split_free(100, 0, 60) == (0, 40, 60)
    assert split_free(100, 30, 70) == (30, 0, 70)
    with pytest.raises(ValueError):
        split_free(100, 30, 71)


def test_docstring_diagram_example() -> None:
    """Pow2, prompt 5, output 6, buddy, 8 tokens computed: 8 token, 2 reserved, 6 internal."""
    manager = ContiguousManager(64, 2048, policy="pow2", placement="buddy")
    request = make_request(5, 6)
    assert manager.allocate_slots(request, 5) is not None
    request.num_computed_tokens = 5
    request.append_output_token_ids([1, 2, 3])
    manager.allocate_slots(request, 3)
    assert manager.get_block_ids("r") == ([0, 16],)
    snapshot = manager.memory_snapshot()
    assert (snapshot.token_states, snapshot.reserved, snapshot.internal_frag) == (8, 2, 6)
    assert (snapshot.external_frag, snapshot.free) == (0, 48)
