"""Unit tests for allocator/request.py: token bookkeeping and incremental block hashes."""

from __future__ import annotations

import pytest

from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.request import Request


@pytest.fixture(autouse=True)
def _seed() -> None:
    init_none_hash(sha256)


def test_counts_and_token_lists() -> None:
    """num_tokens, num_prompt_tokens and num_output_tokens follow appends of ints and lists."""
    request = Request("r", [5, 6, 7], max_tokens=8)
    request.append_output_token_ids(1)
    request.append_output_token_ids([2, 3])
    assert request.num_prompt_tokens == 3
    assert request.num_output_tokens == 3
    assert request.num_tokens == 6
    assert request.output_token_ids == [1, 2, 3]
    assert request.all_token_ids == [5, 6, 7, 1, 2, 3]
    assert request.prompt_token_ids == [5, 6, 7]


def test_defaults() -> None:
    """A new request has no progress, no preemptions and no hashes without a hasher."""
    request = Request("r", range(40), max_tokens=2, final_output_len=5)
    assert request.num_computed_tokens == 0
    assert request.num_preemptions == 0
    assert request.block_hashes == []
    assert request.final_output_len == 5
    assert request.block_hasher is None
    assert not request.skip_reading_prefix_cache


def test_block_hashes_follow_appends() -> None:
    """Hashes cover exactly the full blocks after every append, equal to a fresh request's."""
    hasher = get_request_block_hasher(4, sha256)
    request = Request("r", range(6), max_tokens=20, block_hasher=hasher)
    assert len(request.block_hashes) == 1
    for token in range(6, 17):
        request.append_output_token_ids(token)
        assert len(request.block_hashes) == request.num_tokens // 4
    fresh = Request("f", range(17), max_tokens=1, block_hasher=hasher)
    assert request.block_hashes == fresh.block_hashes


def test_plain_callable_hasher_called_every_append() -> None:
    """A hasher without a block_size attribute is called on every append."""
    calls = []

    def hasher(request: Request) -> list[bytes]:
        calls.append(request.num_tokens)
        return []

    request = Request("r", [1], max_tokens=5, block_hasher=hasher)
    request.append_output_token_ids(2)
    request.append_output_token_ids([3, 4])
    assert calls == [1, 2, 4]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prompt_token_ids": [], "max_tokens": 1}, "empty"),
        ({"prompt_token_ids": [1], "max_tokens": 0}, "max_tokens"),
        ({"prompt_token_ids": [1], "max_tokens": 1, "final_output_len": -1}, "final_output_len"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    """Invalid construction arguments raise ValueError naming the field."""
    with pytest.raises(ValueError, match=match):
        Request("bad", **kwargs)


def test_positional_order_is_vllm_like() -> None:
    """request_id, prompt_token_ids, max_tokens come first, in that order."""
    request = Request("x", (1, 2), 3)
    assert (request.request_id, request.prompt_token_ids, request.max_tokens) == ("x", [1, 2], 3)
