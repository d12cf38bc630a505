"""benchmarks/step_errors.py: held-out split by shape and the error table."""
from __future__ import annotations

import json
from pathlib import Path

from tests.benchkit import load_benchmark
from tests.unit.test_step_fit import _artefact, _points, model_fields


def test_error_report_on_synthetic_artefacts(tmp_path: Path) -> None:
    """The fit's held-out error on noise-free points is ~0; the roofline's is not."""
    errors = load_benchmark("step_errors")
    paths = [_artefact(tmp_path, _points(0.0, name=n), n, f"{n}.json")
             for n in ("Llama-3-8B", "Qwen3-14B")]
    held = [p for p in _points(0.0) if errors.held_out(p)]
    assert 0 < len(held) < len(_points(0.0))
    out = tmp_path / "rows.json"
    assert errors.main([*map(str, paths), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["Llama-3-8B on H200-141GB"]
    held_rows = [r for r in rows if r["held"]]
    assert held_rows and all(abs(r["fit"]["total"] / r["total"] - 1) < 1e-3 for r in held_rows)
    assert max(abs(r["roofline"]["total"] / r["total"] - 1) for r in rows) > 0.2
    assert "calibrated" in rows[0]


def test_fp8_artefact_is_its_own_row(tmp_path: Path) -> None:
    """A Llama-3-8B fp8-cache artefact beside its bf16 one: two rows (not joined), the fp8
    row's roofline attention reading half the KV bytes of the bf16 row's at the same shapes."""
    errors = load_benchmark("step_errors")
    bf16 = _artefact(tmp_path, _points(0.0), file="bf16.json")
    fp8 = tmp_path / "fp8.json"
    data = json.loads(bf16.read_text())
    data["model"]["kv_cache_dtype"] = "fp8_e4m3"
    fp8.write_text(json.dumps(data))
    out = tmp_path / "rows.json"
    assert errors.main([str(bf16), str(fp8), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert set(rows) == {"Llama-3-8B on H200-141GB", "Llama-3-8B kv fp8_e4m3 on H200-141GB"}
    pairs = [(a, b) for a, b in zip(rows["Llama-3-8B on H200-141GB"],
                                        rows["Llama-3-8B kv fp8_e4m3 on H200-141GB"])
             if a["kind"] == "decode" and a["shape"][1] >= 4096]
    assert pairs and all(a["shape"] == b["shape"] for a, b in pairs)
    assert all(0.4 < b["roofline"]["attention"] / a["roofline"]["attention"] < 0.6
               for a, b in pairs)


def _executed_file(tmp_path: Path, name: str, window: int | None, slow: float) -> Path:
    """An executed-steps file (kernels.execute's format, run with --no-parts) of three steps
    of `name` with sliding window `window`, each `slow` x the shipped fit's prediction."""
    import dataclasses

    from sim.cost.gpus import get_gpu
    from sim.cost.models import get_model
    from sim.cost.step_specs import make_auto

    m = dataclasses.replace(get_model(name), sliding_window=window)
    model = {**model_fields(m), "kv_cache_dtype": "bfloat16"}
    fit = make_auto(m, get_gpu("H200"), 1, "auto")
    lines = [{"kind": "header", "log": "x/allocation_log.jsonl.gz", "model": model,
              "device": {"name": "NVIDIA H200"}}]
    for decodes, ctx, prefill in ((8, 1024, []), (0, 0, [[512, 0]]), (4, 2048, [[256, 512]])):
        att, lin, other = fit.gpu_parts(decodes, decodes * ctx, [tuple(p) for p in prefill])
        lines.append({"kind": "step", "batch": {"num_decode": decodes,
                                                "decode_context_sum": decodes * ctx,
                                                "prefill": prefill},
                      "graph_s": slow * (att + lin + other), "attention_s": None,
                      "linear_s": None, "other_s": None})
    path = tmp_path / f"{name}.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_executed_steps_without_parts_report_totals(tmp_path: Path) -> None:
    """Steps executed with --no-parts count for the whole step (10 % slow: 10 % error) and
    leave the part columns empty; a sliding-window variant of a shipped shape takes its fit."""
    errors = load_benchmark("step_errors")
    for window in (None, 256):
        title, rows = errors.executed_rows(str(_executed_file(tmp_path, "Llama-3-8B", window,
                                                               1.1)))
        assert "3 executed steps" in title and "fit = roofline" not in title
        assert all(r["attention"] is None for r in rows)
        assert all(abs(r["fit"]["total"] / r["total"] - 1 / 1.1) < 1e-9 for r in rows)
        line = [x for x in errors.report("t", rows, ["fit"]) if x.startswith("all      held")]
        assert "9.1%" in line[0] and line[0].count("-") >= 2
