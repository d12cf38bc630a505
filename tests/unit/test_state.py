"""sim/sched/state.py: the token-count rule every path uses."""
from __future__ import annotations

from sim.sched.state import num_new_tokens


def test_a_sequence_computes_what_it_lacks_within_the_budget() -> None:
    """A 100-token prompt with 40 computed wants 60; the budget and the model's last
    position cut it; a caught-up decode wants one token."""
    assert num_new_tokens(100, 40, 8192, 4096) == 60
    assert num_new_tokens(100, 40, 25, 4096) == 25
    assert num_new_tokens(100, 40, 8192, 80) == 39  # never position max_model_len - 1
    assert num_new_tokens(101, 100, 8192, 4096) == 1
    assert num_new_tokens(101, 100, 0, 4096) == 0
