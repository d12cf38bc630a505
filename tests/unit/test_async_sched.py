"""Async scheduling (sim/sched/async_sched.py, the engine's overlap): the next step is
scheduled while one runs, requests finishing by length get no extra step, arrivals during a
step wait one step more, preempted requests still receive their in-flight output, and the
per-release rules of sim/sched/spec_rules.py."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from allocator.profiles import profile_for
from sim.cli import main
from sim.config import OptionError, Options
from sim.cost.spec_cost import SpecConfig
from sim.sched.plan import StepPlan
from sim.sched.spec_rules import scheduler_fields
from tests.unit.simkit import STEP_S, make_trace, rows, simulate, steps
from tests.unit.test_spec import drive, scheduler

DATA = Path(__file__).resolve().parents[1] / "data"


def test_finish_by_length_schedules_no_step_past_the_last_token() -> None:
    """Prompt 32, output 3: a prefill and two decodes, async or not (without vLLM's rule
    the in-flight last decode would be followed by a wasted fourth step)."""
    trace = make_trace([(0.0, 32, 3)])
    sync = simulate(trace)
    overlap = simulate(trace, async_scheduling=True)
    assert len(steps(sync)["step"]) == len(steps(overlap)["step"]) == 3
    assert steps(overlap)["overlapped"] == [0, 1, 1]
    assert steps(sync)["overlapped"] == [0, 0, 0]
    assert rows(overlap)[0]["output_tokens"] == 3


def test_arrival_during_a_step_is_admitted_one_step_later() -> None:
    """B arrives while step 0 runs: sync admits it in step 1; async has already scheduled
    step 1, so B starts in step 2."""
    trace = make_trace([(0.0, 32, 10), (STEP_S / 2, 32, 10)])
    sync = rows(simulate(trace))[1]["first_scheduled_s"]
    overlap = rows(simulate(trace, async_scheduling=True))[1]["first_scheduled_s"]
    assert sync == pytest.approx(STEP_S)
    assert overlap == pytest.approx(2 * STEP_S)


def test_preempted_in_flight_requests_get_their_output_and_finish() -> None:
    """A small pool forces preemptions while a step is in flight; every request still ends
    with exactly its output length, no block leaks (replay checks) and invariants hold."""
    trace = make_trace([(0.0, 40, 60), (0.0, 40, 60), (0.0, 40, 60), (0.001, 24, 30)])
    result = simulate(trace, num_gpu_blocks=14, async_scheduling=True, debug=True)
    assert result.summary["num_preemptions"] > 0
    assert [r["output_tokens"] for r in rows(result)] == [60, 60, 60, 30]
    assert all(r["status"] == "finished" for r in rows(result))


def test_async_with_eagle_drafts() -> None:
    """EAGLE K=2, every draft accepted, async: outputs grow by 3 per verify step (1, 4, 7).
    vLLM's finish rule counts only sure outputs (all drafts rejected), so the step scheduled
    while the last verify step runs is not skipped: a fourth step is wasted, as in vLLM."""
    result = simulate(make_trace([(0.0, 32, 7)]), async_scheduling=True,
                      spec=SpecConfig("eagle", 2), acceptance=(1.0, 1.0),
                      num_lookahead_tokens=2)
    cols = steps(result)
    assert [p + d for p, d in zip(cols["prefill_tokens"], cols["decode_tokens"])] \
        == [32, 3, 3, 3]
    assert rows(result)[0]["output_tokens"] == 7


def fields_for(**options: Any) -> dict[str, Any]:
    return scheduler_fields(Options(**options))


NGRAM = '{"method": "ngram", "num_speculative_tokens": 2}'
DRAFT = '{"method": "draft_model", "num_speculative_tokens": 2}'
EAGLE = '{"method": "eagle", "num_speculative_tokens": 2}'


def test_release_defaults_for_async_and_lookahead() -> None:
    assert fields_for()["async_scheduling"] is True
    assert fields_for(async_scheduling=False)["async_scheduling"] is False
    assert fields_for(preemption="swap")["async_scheduling"] is False
    assert fields_for(speculative_config=NGRAM)["async_scheduling"] is False
    eagle = fields_for(speculative_config=EAGLE)
    assert eagle["async_scheduling"] and eagle["use_eagle"]
    assert eagle["num_lookahead_tokens"] == 2
    draft = fields_for(speculative_config=DRAFT)
    assert draft["async_scheduling"] and draft["num_lookahead_tokens"] == 2
    assert fields_for(speculative_config=NGRAM)["num_lookahead_tokens"] == 0
    assert fields_for(speculative_config=NGRAM)["acceptance"] == (0.7, 0.7)


@pytest.mark.parametrize(("options", "option"), [
    ({"speculative_config": NGRAM, "async_scheduling": True}, "async_scheduling"),
    ({"preemption": "swap", "async_scheduling": True}, "async_scheduling"),
    ({"speculative_config": "{not json"}, "speculative_config"),
    ({"speculative_config": '{"method": "medusa", "num_speculative_tokens": 2}'},
     "speculative_config"),
    ({"speculative_config": '{"method": "ngram", "num_speculative_tokens": 0}'},
     "speculative_config"),
    ({"speculative_config": '{"method": "ngram"}'}, "speculative_config"),
    ({"speculative_config": NGRAM, "acceptance_rate": "0.5,0.5,0.5"}, "acceptance_rate"),
    ({"speculative_config": NGRAM, "acceptance_rate": "1.5"}, "acceptance_rate"),
    ({"speculative_config": NGRAM, "acceptance_rate": "x"}, "acceptance_rate"),
    ({"acceptance_rate": "0.5"}, "acceptance_rate"),
])
def test_bad_options_name_the_option(options: dict[str, Any], option: str) -> None:
    with pytest.raises(OptionError) as err:
        fields_for(**options)
    assert err.value.option == option
    assert "--" + option.replace("_", "-") in str(err.value)


@pytest.mark.parametrize("output_len", [1, 5])
def test_preempted_request_receives_its_in_flight_output(output_len: int) -> None:
    """Step 0 (the prefill) is in flight while step 1 is scheduled; the request is preempted
    then. Applying step 0 still delivers its token (vLLM's stale output): with output length
    1 the request finishes in the waiting queue, else it waits with one output."""
    sched = scheduler(make_trace([(0.0, 32, output_len)]), async_scheduling=True)
    step0 = sched.schedule(0.0)
    assert step0 is not None
    seq = step0.seqs[0]
    assert seq.req.num_in_flight_tokens == 32
    # Scheduling step 1 preempts it (before step 1 is launched).
    sched.preemption.preempt(seq, StepPlan(8192))
    sched.apply(step0, STEP_S, 0.0)
    assert seq.num_out == 1 and seq.req.num_in_flight_tokens == 0
    assert seq.status == ("finished" if output_len == 1 else "waiting")
    assert len(sched.state.waiting) == (0 if output_len == 1 else 1)
    assert len(sched.log.groups) == (1 if output_len == 1 else 0)


@pytest.mark.parametrize("argv", [
    ["--speculative-config", "{x"],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": -1}'],
    ["--speculative-config", NGRAM, "--async-scheduling"],
    [str(DATA / "tiny_mooncake.jsonl"), "--n", "2", "--speculative-config", EAGLE],
])
def test_command_line_refusals_exit_2_with_one_line(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main([*argv, "--out", str(tmp_path), "--no-progress", "--limit", "3"])
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--speculative-config" in err or "--async-scheduling" in err


def test_final_output_caches_the_block_it_fills_before_the_free() -> None:
    """The minimal diverging stream of ``vllm_diff.py --scheduler --async`` against vLLM
    0.27.0 (seed 0): A (52-token prompt, 56 outputs) runs; B (101, 12) joins a step later and
    finishes with its 7th block just filled by its last delivered output. vLLM's async
    ``update_from_output`` caches that block before freeing B, so under the 0.24+ free order
    it goes to the queue's tail and A's next block is 13 (pagedsim gave it 11, B's unhashed
    block at the queue's front). 0.23 appends either way."""
    trace = make_trace([(0.0, 52, 56), (0.0, 101, 12)])
    for version, expected in (("0.27", 13), ("0.33", 13), ("0.23", 13)):
        sched = scheduler(trace, async_scheduling=True, num_gpu_blocks=40, max_num_seqs=4,
                          max_num_batched_tokens=128, max_model_len=160,
                          vllm_profile=profile_for(version))
        sched.state.waiting.clear()  # ``scheduler`` queued both; they arrive as in the stream
        records = drive(sched, {0: 0, 1: 1}, 30, overlap=True)
        assert records[28]["blocks"] == {"r0": [1, 2, 3, 4, 12]}
        assert records[29]["blocks"] == {"r0": [1, 2, 3, 4, 12, expected]}, version
