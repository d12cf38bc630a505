"""sim/cost/spec_cost.py: parsing --speculative-config / --acceptance-rate and the drafter's
time per step for each method."""
from __future__ import annotations

import pytest

from sim.cost.gpus import get_gpu
from sim.cost.models import get_model
from sim.cost.spec_cost import (
    DRAFT_PRESET,
    NGRAM_CPU_S,
    SpecConfig,
    eagle_head,
    make_draft_time,
    parse_acceptance,
    parse_spec_config,
)


def test_parse_spec_config_as_vllm_spells_it() -> None:
    spec = parse_spec_config('{"method": "draft_model", "num_speculative_tokens": 4, '
                             '"model": "llama-2-7b"}')
    assert spec == SpecConfig("draft_model", 4, "llama-2-7b")
    for bad in ('[1]', '{"method": "eagle", "num_speculative_tokens": true}',
                '{"method": "eagle", "num_speculative_tokens": 2, "extra": 1}'):
        with pytest.raises(ValueError):
            parse_spec_config(bad)


def test_parse_acceptance_one_or_k_rates() -> None:
    assert parse_acceptance("0.5", 3) == (0.5, 0.5, 0.5)
    assert parse_acceptance("0.9,0.8,0.1", 3) == (0.9, 0.8, 0.1)
    with pytest.raises(ValueError):
        parse_acceptance("0.9,0.8", 3)


def test_drafter_time_per_method() -> None:
    model, gpu = get_model("llama-2-7b"), get_gpu("a100-80gb")
    ngram = make_draft_time(SpecConfig("ngram", 4), model, gpu, 1)
    assert ngram(10, 5000) == pytest.approx(10 * NGRAM_CPU_S)
    eagle = make_draft_time(SpecConfig("eagle", 4), model, gpu, 1)
    draft = make_draft_time(SpecConfig("draft_model", 4), model, gpu, 1)
    draft2 = make_draft_time(SpecConfig("draft_model", 2), model, gpu, 1)
    assert eagle(0, 0) == draft(0, 0) == 0.0
    assert draft(8, 4000) == pytest.approx(2 * draft2(8, 4000))
    # One 7B layer plus its LM head weighs more than the 68M draft model.
    assert eagle(8, 4000) > draft(8, 4000) > 0.0
    assert eagle_head(model).num_layers == 1
    assert DRAFT_PRESET.num_params < eagle_head(model).num_params
