"""Unit tests for the Max, Pow2 and Oracle reservation policies."""
from __future__ import annotations

import pytest

from allocator.request import Request
from allocator.reservation import (
    RESERVATION_POLICIES,
    get_policy,
    next_power_of_two,
    reserve_max,
    reserve_oracle,
    reserve_pow2,
)


def make_request(prompt_len: int, final_output_len: int | None, max_tokens: int = 4096) -> Request:
    return Request("r", range(prompt_len), max_tokens, final_output_len=final_output_len)


def test_next_power_of_two() -> None:
    """2^ceil(log2 n), with 0 for 0."""
    values = [next_power_of_two(n) for n in (0, 1, 2, 3, 25, 32, 33)]
    assert values == [0, 1, 2, 4, 32, 32, 64]
    with pytest.raises(ValueError):
        next_power_of_two(-1)


def test_pow2_with_25_output_tokens_reserves_32() -> None:
    """The paper's example: a true output of 25 tokens reserves 32 output slots."""
    assert reserve_pow2(make_request(100, 25), 2048) == 100 + 32


def test_pow2_is_capped_at_max_model_len() -> None:
    """Prompt 1100 plus 600 output would reserve 1100 + 1024; the cap is 2048."""
    assert reserve_pow2(make_request(1100, 600), 2048) == 2048


def test_max_reserves_max_model_len() -> None:
    """Max ignores the request and reserves the model's maximum length."""
    assert reserve_max(make_request(10, 3), 2048) == 2048


def test_oracle_reserves_prompt_plus_true_output() -> None:
    """Oracle uses the true output, capped by max_tokens and by max_model_len."""
    assert reserve_oracle(make_request(10, 25), 2048) == 35
    assert reserve_oracle(make_request(10, 25, max_tokens=7), 2048) == 17
    assert reserve_oracle(make_request(10, 5000), 2048) == 2048
    assert reserve_oracle(make_request(10, None, max_tokens=50), 2048) == 60


def test_policy_lookup() -> None:
    """Names map to the policy functions; unknown names raise ValueError naming them."""
    assert {name: get_policy(name) for name in RESERVATION_POLICIES} == RESERVATION_POLICIES
    with pytest.raises(ValueError, match="'half'"):
        get_policy("half")
