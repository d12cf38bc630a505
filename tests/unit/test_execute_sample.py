"""Sampling: every shape class is executed, within the per-class and per-section caps,
deterministically for a seed."""
from __future__ import annotations

import random

import pytest

from kernels.execute.sample import Sampler, SampleRule, bucket, quota, shape_key


def test_bucket_is_next_power_of_two() -> None:
    assert [bucket(x) for x in (0, 1, 2, 3, 4, 5, 1000, 1024, 1025)] == \
        [0, 1, 2, 4, 4, 8, 1024, 1024, 2048]


def test_shape_key() -> None:
    """Decodes by count and mean cached context; chunks by tokens and longest prefix; moves."""
    spans = [(100, 101), (300, 301), (0, 500), (2000, 2100), (7, 7)]
    assert shape_key(spans, False, False) == "d2-c256-p1024-x2048"
    assert shape_key([(5, 6)], True, True) == "d1-c8-p0-x0-copy-swap"
    assert shape_key([(0, 16)], False, False) == "d0-c0-p16-x0"


def test_quota_shrinks_to_fit_but_never_below_one() -> None:
    assert quota({"a": 10, "b": 1, "c": 5}, 4, 100) == 4
    assert quota({"a": 10, "b": 1, "c": 5}, 4, 6) == 2
    assert quota({k: 5 for k in "abcdefgh"}, 4, 3) == 1


def _offer_all(rule: SampleRule, keys: list[str]) -> Sampler:
    s = Sampler(rule)
    for i, key in enumerate(keys):
        s.offer(key, i)
    return s


def test_chosen_are_each_class_lowest_priorities() -> None:
    """The rule of the module docstring, recomputed here from the same seeded stream."""
    rng = random.Random(11)
    keys = [rng.choice("aabbbbbbcd") for _ in range(200)]
    rule = SampleRule(per_class=3, max_steps=1000, seed=42)
    chosen = _offer_all(rule, keys).chosen()
    prio = random.Random(42)
    draws = [(prio.random(), i) for i in range(len(keys))]
    want = []
    for key in "abcd":
        mine = sorted((p, i) for p, i in draws if keys[i] == key)[:3]
        want += [i for _, i in mine]
    assert [item for _, item in chosen] == sorted(want)
    assert all(keys[item] == key for key, item in chosen)


def test_caps_and_coverage() -> None:
    """Per-class cap, section cap through the quota, and every class at least once."""
    rng = random.Random(3)
    keys = [f"k{rng.randrange(30)}" for _ in range(2000)]
    s = _offer_all(SampleRule(per_class=5, max_steps=60, seed=1), keys)
    chosen = s.chosen()
    per = {k: sum(1 for c, _ in chosen if c == k) for k in set(keys)}
    assert set(per) == set(keys) and min(per.values()) >= 1
    assert max(per.values()) == 2 == s.summary()["per_class_quota"]
    assert len(chosen) <= 60
    tight = _offer_all(SampleRule(per_class=5, max_steps=10, seed=1), keys).chosen()
    assert len(tight) == 30 and {k for k, _ in tight} == set(keys)


def test_deterministic_for_a_seed() -> None:
    keys = [f"k{i % 7}" for i in range(500)]
    rule = SampleRule(per_class=2, max_steps=100, seed=9)
    assert _offer_all(rule, keys).chosen() == _offer_all(rule, keys).chosen()
    other = _offer_all(SampleRule(per_class=2, max_steps=100, seed=10), keys).chosen()
    assert other != _offer_all(rule, keys).chosen()


def test_empty_steps_are_counted_not_chosen() -> None:
    s = Sampler(SampleRule())
    for i, key in enumerate(["a", None, "a", None]):
        s.offer(key, i)
    assert [item for _, item in s.chosen()] == [0, 2]
    assert s.summary()["num_without_sequences"] == 2 and s.summary()["num_steps"] == 4


def test_bad_rule() -> None:
    with pytest.raises(ValueError, match="per_class"):
        SampleRule(per_class=0)
