"""kernels.validate on tiny allocation logs made with the real allocator (CPU, Triton interpreter)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kernels.validate import Options, main, validate_log
from kernels.validate.mutate import Mutation
from kernels.validate.ops import _copy_batches
from tests.unit.validate_logkit import LogKit, scenario_log


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_log(tmp_path_factory.mktemp("vlog") / "allocation_log.jsonl.gz")


def _lines(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


def _write(path: Path, lines: list[dict]) -> Path:
    with gzip.open(path, "wt") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in lines)
    return path


def test_scenario_passes_every_step(log: Path) -> None:
    """Prefix hits, chunked prefill, fork + COW, swaps and recompute all validate at fp32."""
    lines = _lines(log)
    [res] = validate_log(log, Options())
    assert res.failure is None
    assert res.num_steps == res.num_validated == len(lines) - 1
    assert res.num_seq_checks == sum(len(r["seqs"]) for r in lines[1:])
    assert 0 < res.max_error < 1e-5
    assert res.unverified_tokens == 0
    assert res.memory["all_layers_bytes"] == 2 * 2 * 40 * 4 * 1 * 16 * 4


def test_steps_n_compares_first_n_and_special_steps(log: Path) -> None:
    """--steps 2 compares steps 0-1 plus every step with a copy, swap, preemption or hit."""
    steps = _lines(log)[1:]
    special = {r["step"] for r in steps if r["copies"] or r["swap_out"] or r["swap_in"]
               or r["preemptions"] or r["prefix_hits"]}
    [res] = validate_log(log, Options(steps=2))
    assert res.failure is None
    assert {row["step"] for row in res.per_step} == {0, 1} | special
    assert res.num_steps == len(steps)


@pytest.mark.parametrize("poison", [True, False])
@pytest.mark.parametrize("mutation", ["table:0", "table:3", "copy:0:1", "slot:0", "slot:2"])
def test_mutations_are_caught_by_attention(log: Path, mutation: str, poison: bool) -> None:
    """With the slot check off, each seeded mutation fails the attention comparison.

    Without NaN poisoning (unwritten rows are zeros) the error is finite: the attention
    values themselves differ, not just a NaN from an unwritten slot.
    """
    opts = Options(check_slots=False, mutation=Mutation.parse(mutation), poison=poison)
    [res] = validate_log(log, opts)
    assert res.mutation is not None and res.mutation.startswith("step ")
    assert res.failure_kind == "attention", res.failure
    assert f"step {res.mutation.split()[1].rstrip(':')}" in res.failure
    error = float(res.failure.split("attention error ")[1].split()[0])
    assert error > 1e-2 and (poison or error < float("inf"))


def test_slot_check_catches_a_shifted_slot_first(log: Path) -> None:
    """With the structural check on, a shifted slot is reported as a slot mismatch."""
    [res] = validate_log(log, Options(mutation=Mutation.parse("slot:0")))
    assert res.failure_kind == "slots"
    assert "block table gives" in res.failure


def test_wrong_prefix_hit_is_caught(log: Path, tmp_path: Path) -> None:
    """A prefix hit whose blocks hold other tokens than the request's own fails."""
    lines = _lines(log)
    step = next(r for r in lines[1:] if r["prefix_hits"])
    step["prefix_hits"][0]["token_ids"][3] += 1
    [res] = validate_log(_write(tmp_path / "bad.jsonl.gz", lines), Options())
    assert res.failure_kind == "attention"
    assert f"request {step['prefix_hits'][0]['request_id']}" in res.failure


def test_missing_hit_tokens_are_counted_unverified(tmp_path: Path) -> None:
    """Without prefix_hits[].token_ids the hit is taken from the blocks and counted."""
    log = scenario_log(tmp_path / "nohit.jsonl.gz", hit_token_ids=False)
    first_hits = {}
    for r in _lines(log)[1:]:
        for h in r["prefix_hits"]:
            first_hits.setdefault(h["request_id"], h["num_tokens"])
    [res] = validate_log(log, Options(steps=0))
    assert res.failure is None
    assert res.unverified_tokens == first_hits["b"]


def test_sliding_window_with_null_blocks(tmp_path: Path) -> None:
    """A sliding-window log (freed blocks become null block 0) validates, chunks included."""
    kit = LogKit(window=6, num_blocks=48)
    kit.add("a", list(range(1, 19)))
    kit.step({"a": 10})
    kit.step({"a": None})
    for _ in range(5):
        kit.step({"a": 1})
    lines = kit.lines
    assert 0 in lines[-1]["seqs"][0]["block_table"]
    [res] = validate_log(kit.write(tmp_path / "w.jsonl.gz"), Options())
    assert res.failure is None and res.num_validated == 7


def test_cli_report_and_exit_codes(log: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """main() returns 0 and writes the JSON report; a broken field gives exit 2 naming it."""
    report = tmp_path / "r.json"
    assert main([str(log), "--device", "cpu", "--steps", "1", "--report", str(report)]) == 0
    assert "PASS" in capsys.readouterr().out
    assert json.loads(report.read_text())["sections"][0]["num_validated"] >= 1
    lines = _lines(log)
    del lines[2]["seqs"][0]["slot_mapping"]
    bad = _write(tmp_path / "bad.jsonl.gz", lines)
    assert main([str(bad), "--device", "cpu"]) == 2
    assert "bad.jsonl.gz:3: missing field 'seqs[0].slot_mapping'" in capsys.readouterr().err


def test_torch_backend_passes_and_catches(log: Path) -> None:
    """The float64 gather backend agrees with the logical rows and still sees a bad table."""
    [res] = validate_log(log, Options(backend="torch"))
    assert res.failure is None and res.max_error < 1e-12
    [bad] = validate_log(log, Options(backend="torch", check_slots=False,
                                      mutation=Mutation.parse("table:1")))
    assert bad.failure_kind == "attention"


def test_mismatch_exit_code(log: Path, capsys: pytest.CaptureFixture) -> None:
    """A caught mutation makes the CLI exit 1 with the failing request and blocks."""
    assert main([str(log), "--device", "cpu", "--no-slot-check", "--mutate", "table:0"]) == 1
    out = capsys.readouterr().out
    assert "FAIL step" in out and "block table [" in out


def test_copy_plan_batches_keep_dependencies() -> None:
    """A copy reading or overwriting an earlier copy's block starts a new copy_blocks batch."""
    assert _copy_batches([(1, 2), (3, 4)]) == [[(1, 2), (3, 4)]]
    assert _copy_batches([(1, 2), (2, 5), (6, 1)]) == [[(1, 2)], [(2, 5), (6, 1)]]
    assert _copy_batches([(1, 2), (3, 2)]) == [[(1, 2)], [(3, 2)]]
