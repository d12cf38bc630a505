"""n > 1 (cow and fanout), beam search and swap preemption, worked out by hand (bs 16)."""
from __future__ import annotations

import pytest

from sim.sched.sampling import choose_parents
from tests.unit.simkit import make_trace, rows, simulate, steps


def test_n4_cow_one_prefill_then_three_copies() -> None:
    """Prompt 40 (2 full blocks + 8): one prefill, 3 forks; the first decode step copies the
    shared partial block for 3 of the 4 holders, the last writes in place."""
    result = simulate(make_trace([(0.0, 40, 3)]), n=4, sampling_mode="cow")
    cols = steps(result)
    assert cols["prefill_tokens"][0] == 40 and cols["num_scheduled_seqs"][0] == 1
    assert cols["num_running_seqs"][1] == 4
    assert cols["num_cow_copies"] == [0, 3, 0]
    assert result.summary["num_cow_copies"] == 3
    # After the fork 4 sequences have 40 computed tokens each, stored once.
    assert cols["logical_slots"][0] == 160 and cols["token_states"][0] == 40
    (row,) = rows(result)
    assert row["status"] == "finished" and row["output_tokens"] == 3
    assert result.summary["num_finished"] == 1 and result.summary["leaked_blocks"] == 0


def test_n4_fanout_shares_full_prompt_blocks_through_the_cache() -> None:
    """Four independent requests in one step: samples 1-3 hit the 2 full blocks of sample 0."""
    result = simulate(make_trace([(0.0, 40, 3)]), n=4, sampling_mode="fanout")
    cols = steps(result)
    assert cols["prefix_queries"][0] == 160 and cols["prefix_hits"][0] == 96
    assert cols["prefill_tokens"][0] == 40 + 3 * 8
    assert result.summary["num_cow_copies"] == 0
    assert result.summary["prefix_hit_rate"] == pytest.approx(96 / 160)
    assert result.summary["num_finished"] == 1


@pytest.mark.parametrize("mode", ["cow", "fanout"])
def test_n4_on_contiguous_gives_each_sample_a_region(mode: str) -> None:
    """Oracle holds one 43-slot region (buddy: 64) per sample, never sharing."""
    result = simulate(make_trace([(0.0, 40, 3)]), "oracle", n=4, sampling_mode=mode,
                      num_gpu_blocks=17)
    cols = steps(result)
    assert max(cols["num_running_seqs"]) == 4
    assert result.summary["num_cow_copies"] == 0 and result.summary["num_finished"] == 1


def test_beam_search_keeps_width_and_frees_dead_beams() -> None:
    """Width 3 over 12 tokens: never more than 3 live beams; forks copy partial blocks."""
    result = simulate(make_trace([(0.0, 20, 12)]), beam_width=3, seed=1)
    cols = steps(result)
    assert max(cols["num_running_seqs"]) == 3
    assert result.summary["num_cow_copies"] >= 2
    assert result.summary["num_finished"] == 1 and result.summary["leaked_blocks"] == 0


def test_beam_parent_model_is_seeded_and_documented() -> None:
    """keep_prob 1 keeps every parent; 0 picks uniformly; the same seed repeats."""
    import random

    assert choose_parents(random.Random(0), 4, 1.0) == [0, 1, 2, 3]
    a = choose_parents(random.Random(5), 8, 0.0)
    assert a == choose_parents(random.Random(5), 8, 0.0) and all(0 <= p < 8 for p in a)


