"""`python -m kernels.execute` on the CPU (Triton interpreter): every sampled step is executed
exactly once, with the logged shapes, block tables and slots, and written as documented."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from kernels.execute.batch import capture_sizes, padded_size
from kernels.execute.run import RunOptions, execute_log, main, step_key
from kernels.execute.sample import SampleRule
from kernels.execute.step import ExecOptions
from kernels.execute.timing import TimingOptions
from tests.unit.validate_logkit import LogKit, scenario_log


def _raw(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def long_log(path: Path, decodes: int = 8) -> Path:
    """Three prompts, then `decodes` decode steps of all three: few classes, many steps (by
    default 11 steps in 5 classes, of 5, 3, 1, 1 and 1 steps)."""
    kit = LogKit(num_blocks=80, num_cpu_blocks=0)
    for i, rid in enumerate("abc"):
        kit.add(rid, list(range(10 * i + 1, 10 * i + 12)))
    kit.step({"a": None})
    kit.step({"a": 1, "b": None})
    kit.step({"a": 1, "b": 1, "c": None})
    for _ in range(decodes):
        kit.step({"a": 1, "b": 1, "c": 1})
    return kit.write(path)


def _expected(seqs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the forward must launch for these logged sequences (decodes first)."""
    live = [s for s in seqs if s["positions"][1] > s["positions"][0]]
    dec = [s for s in live if s["positions"][1] - s["positions"][0] == 1]
    pre = [s for s in live if s["positions"][1] - s["positions"][0] > 1]
    tokens = len(dec) + sum(s["positions"][1] - s["positions"][0] for s in pre)
    padded = padded_size(tokens, capture_sizes()) or tokens
    starts = [0]
    for s in pre:
        starts.append(starts[-1] + s["positions"][1] - s["positions"][0])
    return {"dec": dec, "pre": pre, "padded": padded, "starts": starts, "full": not pre,
            "slots": [x for s in dec + pre for x in s["slot_mapping"]]}


def _check_trace(raw: dict[str, Any], row: dict[str, Any], trace: list[dict[str, Any]],
                 layers: int, kv_layers: int) -> None:
    want = _expected(raw["seqs"])
    assert row["batch"]["padded_tokens"] == want["padded"]
    attn = [t for t in trace if t["op"] == "attention"]
    assert [t["layer"] for t in attn] == list(range(layers))
    for t in attn:
        assert t["cache"] == t["layer"] % kv_layers
        assert t["slots"] == want["slots"] + [-1] * (want["padded"] - len(want["slots"]))
        d = len(want["dec"])
        assert t["decode_rows"] == (want["padded"] if want["full"] else d)
        assert t["decode_lens"][:d] == [s["context_len"] for s in want["dec"]]
        assert set(t["decode_lens"][d:]) <= {1}
        for s, table in zip(want["dec"], t["decode_tables"]):
            assert table[: len(s["block_table"])] == s["block_table"]
        assert t["prefill_rows"] == want["starts"][-1]
        if want["pre"]:
            assert t["prefill_starts"] == want["starts"]
            assert t["prefill_lens"] == [s["context_len"] for s in want["pre"]]
            for s, table in zip(want["pre"], t["prefill_tables"]):
                assert table[: len(s["block_table"])] == s["block_table"]
    for op in ("qkv", "mlp"):
        assert [t["m"] for t in trace if t["op"] == op] == [want["padded"]] * layers
    [head] = [t for t in trace if t["op"] == "lm_head"]
    assert head["m"] == (want["padded"] if want["full"] else len(want["dec"] + want["pre"]))


@pytest.mark.parametrize("kv_layers", [None, 1])
def test_every_step_executed_once_with_logged_shapes(tmp_path: Path,
                                                     kv_layers: int | None) -> None:
    """Scenario log (prefills, chunks, decodes, COW copies, swaps, preemption): all 11 steps
    run, once each, on the logged tables and slots; with one KV layer the caches cycle."""
    log = scenario_log(tmp_path / "log.jsonl.gz")
    raw = {o["step"]: o for o in _raw(log) if o["kind"] == "step"}
    traces: dict[int, list[dict[str, Any]]] = {}
    parts = kv_layers is None
    opts = RunOptions(traces=traces, kv_layers=kv_layers,
                      execution=ExecOptions(timing=TimingOptions(parts=parts)))
    [sec] = execute_log(log, tmp_path / "out.jsonl", opts)
    lines = _lines(tmp_path / "out.jsonl")
    rows = [x for x in lines if x["kind"] == "step"]
    assert [r["step"] for r in rows] == sorted(raw) == list(range(11))
    assert lines[0]["memory"]["kv_layers"] == (kv_layers or 2)
    for row in rows:
        _check_trace(raw[row["step"]], row, traces[row["step"]], 2, kv_layers or 2)
        assert row["class"] == step_key(raw[row["step"]], "x")
        assert row["eager_s"] > 0
        assert all((row[f"{p}_s"] > 0) if parts else row[f"{p}_s"] is None
                   for p in ("attention", "linear", "other"))
        assert row["graph_s"] is None
        moved = raw[row["step"]]["copies"] or raw[row["step"]]["swap_out"] \
            or raw[row["step"]]["swap_in"]
        assert (row["moves_s"] > 0) == bool(moved)
    assert sum(r["batch"]["copies"] for r in rows) == sum(len(o["copies"]) for o in raw.values())
    assert len(sec.rows) == 11


def test_fp8_log_runs_on_fp8_caches(tmp_path: Path) -> None:
    """An fp8 log (bf16 model, `kv_cache_dtype` fp8, scales 0.5 / 2): every step runs once on
    the logged shapes, every attention launch reads a float8_e4m3fn cache with the logged
    scales, and the header records the fp8 cache at one byte per value (bf16 would be two)."""
    fp8 = {"kv_cache_dtype": "fp8", "k_scale": 0.5, "v_scale": 2.0}
    log = scenario_log(tmp_path / "log.jsonl.gz", dtype="bf16", arch=fp8)
    raw = {o["step"]: o for o in _raw(log) if o["kind"] == "step"}
    traces: dict[int, list[dict[str, Any]]] = {}
    opts = RunOptions(traces=traces, execution=ExecOptions(timing=TimingOptions(parts=False)))
    execute_log(log, tmp_path / "out.jsonl", opts)
    header, *rows = _lines(tmp_path / "out.jsonl")
    assert [r["step"] for r in rows] == sorted(raw) == list(range(11))
    for row in rows:
        _check_trace(raw[row["step"]], row, traces[row["step"]], 2, 2)
        attn = [t for t in traces[row["step"]] if t["op"] == "attention"]
        assert {(t["cache_dtype"], t["k_scale"], t["v_scale"]) for t in attn} == \
            {("torch.float8_e4m3fn", 0.5, 2.0)}
    model, memory = header["model"], header["memory"]
    assert (model["dtype"], model["kv_cache_dtype"]) == ("bfloat16", "fp8_e4m3")
    values = 2 * 2 * header["num_gpu_blocks"] * header["block_size"] * model["num_kv_heads"] \
        * model["head_dim"]
    assert (memory["kv_dtype"], memory["kv_bytes"]) == ("float8_e4m3fn", values)
    assert (memory["k_scale"], memory["v_scale"]) == (0.5, 2.0)


def test_sampling_caps_and_covers_every_class(tmp_path: Path) -> None:
    """A long log: at most `per_class` steps of each class (two classes hold more), every
    class executed."""
    log = long_log(tmp_path / "log.jsonl.gz")
    raw = [o for o in _raw(log) if o["kind"] == "step"]
    classes = {step_key(o, "x") for o in raw}
    quick = ExecOptions(timing=TimingOptions(parts=False))
    opts = RunOptions(rule=SampleRule(per_class=2, max_steps=100, seed=4), traces={},
                      execution=quick)
    execute_log(log, tmp_path / "out.jsonl", opts)
    header, *rows = _lines(tmp_path / "out.jsonl")
    got = [r["class"] for r in rows]
    assert set(got) == classes and max(got.count(c) for c in classes) == 2
    assert len(rows) < len(raw) and sum(header["sampling"]["class_counts"].values()) == len(raw)
    assert sum(n > 2 for n in header["sampling"]["class_counts"].values()) == 2
    assert opts.traces is not None and sorted(opts.traces) == [r["step"] for r in rows]
    by_step = {o["step"]: o for o in raw}
    for row in rows:
        _check_trace(by_step[row["step"]], row, opts.traces[row["step"]], 2, 2)
    execute_log(log, tmp_path / "again.jsonl", RunOptions(rule=opts.rule, execution=quick))
    assert [r["step"] for r in _lines(tmp_path / "again.jsonl")[1:]] == [r["step"] for r in rows]


def test_output_format_and_atomic_write(tmp_path: Path) -> None:
    """One header (format, model, sampling, method, fields) per section, then step rows;
    nothing else is left in the output directory."""
    log = long_log(tmp_path / "log.jsonl.gz", decodes=3)
    out = tmp_path / "o" / "steps.jsonl"
    assert main([str(log), "--device", "cpu", "--out", str(out), "--no-parts"]) == 0
    header, *rows = _lines(out)
    assert header["kind"] == "header" and header["format"] == "pagedsim-executed-steps"
    assert header["model"]["hidden_size"] == 32 and header["sampling"]["per_class"] == 4
    assert {"graph_s", "eager_s", "moves_s"} <= set(header["method"]) | {"graph_s"}
    assert header["options"]["timing"]["parts"] is False
    assert all(r["kind"] == "step" and r["attention_s"] is None for r in rows)
    assert [p.name for p in out.parent.iterdir()] == ["steps.jsonl"]


def _bad_log(tmp_path: Path, **model: Any) -> Path:
    kit = LogKit()
    kit.add("a", [1, 2, 3, 4, 5])
    kit.step({"a": None})
    del kit.lines[0]["model"]["vocab_size"]
    kit.lines[0]["model"].update(model)
    return kit.write(tmp_path / "bad.jsonl.gz")


def test_e5m2_cache_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An fp8 e5m2 cache is refused in one line naming the field (the kernels take e4m3)."""
    bad = _bad_log(tmp_path, kv_cache_dtype="fp8_e5m2", vocab_size=1024)
    assert main([str(bad), "--device", "cpu", "--out", str(tmp_path / "o.jsonl")]) == 2
    [err] = capsys.readouterr().err.strip().splitlines()
    assert "field 'model.kv_cache_dtype' = 'fp8_e5m2'" in err and "e4m3" in err


@pytest.mark.parametrize(("args", "message"), [
    (["BAD"], "missing field 'model.vocab_size'"),
    (["missing.jsonl.gz"], "cannot read the allocation log"),
    (["BAD", "--per-class", "0"], "--per-class"),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      args: list[str], message: str) -> None:
    bad = _bad_log(tmp_path)
    argv = [str(bad) if a == "BAD" else str(tmp_path / a) if a.endswith(".gz") else a
            for a in args]
    assert main([*argv, "--device", "cpu", "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "o.jsonl").exists()
