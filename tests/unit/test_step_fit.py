"""The fitted step model: least squares recovers known terms; specs fit:FILE, fit, auto."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.cost.calibration import read_calibration
from sim.cost.fit_terms import (
    KINDS,
    PROGRAMS_PER_SM,
    TERMS,
    features,
    fit_nonnegative,
    padded_tokens,
    prefill_tile,
    tile_waves,
)
from sim.cost.gpus import get_gpu
from sim.cost.model_config import ModelConfig
from sim.cost.models import get_model
from sim.cost.step_extras import ExtendedStepModel
from sim.cost.step_fit import FitStepModel, fit_coefficients, point_batch, samples
from sim.cost.step_model import make_step_model
from sim.cost.step_roofline import RooflineStepModel
from sim.results.alloc_log import architecture

MODEL, GPU = get_model("Llama-3-8B"), get_gpu("H200-141GB")
# (decodes, decode context, prefill tokens, cached prefix), as benchmarks/calibrate.py's grids.
GRID = ([(b, c, 0, 0) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) for c in (128, 1024, 4096,
                                                                          16384)]
        + [(0, 0, n, p) for n in (16, 64, 256, 1024, 4096) for p in (0, 1024, 8192)]
        + [(b, c, n, 0) for b in (4, 16, 64) for c in (1024, 4096) for n in (64, 512, 2048)])
# Known terms per kind: (floor per launch s, 1 / memory efficiency, 1 / compute efficiency,
# s per sequence, s per key tile on the critical path, roofline weight, 1 / efficiency of the
# routed experts' weight reads) for attention, linear, other. Prefill and mixed steps share
# their linear terms (sim/cost/step_fit.py, CHUNK_KINDS).
TRUE = {"decode": [[6e-6, 1 / 0.8, 0.0, 2e-6, 0.0, 0.0, 0.0],
                   [3e-6, 1 / 0.87, 1 / 0.6, 0.0, 0.0, 0.0, 1 / 0.45],
                   [2e-6, 1 / 0.5, 0.0, 1e-7, 0.0, 0.0, 0.0]],
        "prefill": [[8e-6, 1 / 0.7, 1 / 0.9, 0.0, 2e-6, 0.0, 0.0],
                    [3e-6, 0.2, 0.3, 0.0, 0.0, 1 / 0.8, 1 / 0.5],
                    [2e-6, 1 / 0.6, 0.0, 0.0, 0.0, 0.0, 0.0]],
        "mixed": [[9e-6, 1 / 0.75, 1 / 0.5, 1e-6, 1e-6, 0.0, 0.0],
                  [3e-6, 0.2, 0.3, 0.0, 0.0, 1 / 0.8, 1 / 0.5],
                  [2e-6, 1 / 0.55, 0.0, 0.0, 0.0, 0.0, 0.0]]}


def _points(noise: float, seed: int = 0, name: str = "Llama-3-8B") -> list[dict[str, Any]]:
    roof, rng, out = RooflineStepModel(get_model(name), GPU), random.Random(seed), []
    for b, c, n, p in GRID:
        point = {"num_decode": b, "decode_context": c, "prefill_new": n, "prefill_prefix": p}
        kind, rows = features(roof, *point_batch(point))
        parts = [float(np.dot(TRUE[kind][i], rows[i])) * (1 + rng.gauss(0, noise))
                 for i in range(3)]
        out.append({**point, "kind": kind, "attention_s": parts[0], "linear_s": parts[1],
                    "other_s": parts[2], "graph_s": 0.97 * sum(parts)})
    return out


def model_fields(m: ModelConfig) -> dict[str, Any]:
    """`m` as an artefact's (or an executed-steps header's) bf16 `model` object."""
    return {"name": m.name, "num_layers": m.num_layers, "num_heads": m.num_heads,
            "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim, "dtype": "bfloat16",
            "sliding_window": m.sliding_window, **architecture(m)}


def _artefact(tmp_path: Path, points: list[dict[str, Any]], name: str = "Llama-3-8B",
              file: str = "cal.json") -> Path:
    model = model_fields(get_model(name))
    path = tmp_path / file
    path.write_text(json.dumps({"format": "pagedsim-step-calibration", "format_version": 1,
                                "model": model, "tp": 1, "device": {"name": "NVIDIA H200"},
                                "date": "2026-12-01T00:00:00Z", "points": points}))
    return path


def test_point_batch_reads_several_chunks() -> None:
    """`num_prefill` copies of the chunk; an older point without the field has one."""
    point = {"num_decode": 2, "decode_context": 10, "prefill_new": 5, "prefill_prefix": 3}
    assert point_batch(point) == (2, 20, [(5, 3)])
    assert point_batch({**point, "num_prefill": 3}) == (2, 20, [(5, 3)] * 3)
    assert point_batch({**point, "prefill_new": 0, "num_prefill": 0}) == (2, 20, [])


def test_mixed_steps_share_the_prefill_linear_terms(
        tmp_path: Path) -> None:
    """Mixed points of at most 576 tokens, prefills up to 4,096: the linear part of a mixed
    step of two 2,048-token chunks beside decodes comes out exact, since it is fitted on both
    kinds' points, and a mixed kind's own linear terms, for all the kinds share, are the
    prefill's (attention and the other part stay per kind)."""
    roof = RooflineStepModel(MODEL, GPU)
    small = [p for p in _points(0.0) if p["kind"] != "mixed" or p["prefill_new"] <= 512]
    coef = fit_coefficients(samples(read_calibration(_artefact(tmp_path, small))))
    assert coef.terms["mixed"][1] == pytest.approx(coef.terms["prefill"][1])
    assert coef.terms["mixed"][2] != pytest.approx(coef.terms["prefill"][2])
    decodes, ctx, prefills = 4, 4 * 4096, [(2048, 0), (2048, 0)]
    kind, rows = features(roof, decodes, ctx, prefills)
    _, linear, _ = FitStepModel(MODEL, GPU, 1, coef, "fit").gpu_parts(decodes, ctx, prefills)
    assert kind == "mixed"
    assert linear == pytest.approx(0.97 * float(np.dot(TRUE[kind][1], rows[1])), rel=1e-6)


def test_nonnegative_fit_is_exact_and_clamps() -> None:
    """Exact data gives its coefficients back; a negative best fit drops that column."""
    x = np.array([[1.0, 2.0], [1.0, 5.0], [1.0, 9.0], [1.0, 4.0]])
    assert fit_nonnegative(x, x @ np.array([0.5, 2.0])) == pytest.approx([0.5, 2.0])
    coef = fit_nonnegative(x, x @ np.array([5.0, -0.1]))
    assert (coef >= 0).all() and coef[1] == 0


def test_fit_recovers_known_coefficients(tmp_path: Path) -> None:
    """On noise-free synthetic points of three model shapes (the calibrated roofline's pooled
    fit) each kind's terms and the overlap ratio come back. One shape alone cannot separate a
    step's launch floors from its weight reads (both constant): see the held-out test."""
    data = [s for name in ("Llama-3-8B", "Qwen3-14B", "Qwen3-30B-A3B")
            for s in samples(read_calibration(_artefact(tmp_path, _points(0.0, name=name),
                                                        name, f"{name}.json")))]
    coef = fit_coefficients(data)
    for kind in KINDS:
        assert coef.ratio[kind] == pytest.approx(0.97)
        for got, want in zip(coef.terms[kind], TRUE[kind]):
            assert got == pytest.approx(want, rel=1e-4, abs=1e-9), kind


def test_overlap_offset_is_recovered_and_fixes_the_size_bias(tmp_path: Path) -> None:
    """Whole steps of 0.95 x their parts plus 0.2 ms: the per-shape fit (`offset`) gets both
    back and prices every step within 0.1 %; the median ratio alone prices the smallest
    steps low and the longest prefills high, as the shipped artefacts showed."""
    points = [{**p, "graph_s": 0.95 / 0.97 * p["graph_s"] + 2e-4} for p in _points(0.0)]
    data = samples(read_calibration(_artefact(tmp_path, points)))
    shifted, flat = fit_coefficients(data, offset=True), fit_coefficients(data)
    for kind in KINDS:
        assert shifted.ratio[kind] == pytest.approx(0.95, rel=1e-6)
        assert shifted.offset[kind] == pytest.approx(2e-4, rel=1e-4)
        assert flat.offset.get(kind, 0.0) == 0.0
    def error(coef, p) -> float:
        prefills = [(p["prefill_new"], p["prefill_prefix"])] if p["prefill_new"] else []
        parts = FitStepModel(MODEL, GPU, 1, coef, "fit").gpu_parts(
            p["num_decode"], p["num_decode"] * p["decode_context"], prefills)
        return sum(parts) / p["graph_s"] - 1

    assert max(abs(error(shifted, p)) for p in points) < 1e-3
    by_shape = {(p["prefill_new"], p["prefill_prefix"], p["num_decode"]): p for p in points}
    assert error(flat, by_shape[(16, 0, 0)]) < -0.01 < 0.01 < error(flat, by_shape[(4096, 8192, 0)])


def test_fit_predicts_held_out_points_under_noise(tmp_path: Path) -> None:
    """Fitted on every other point with 3 % noise: held-out totals within 3 % (median)."""
    points = _points(0.03)
    fitted, held = points[::2], points[1::2]
    path = _artefact(tmp_path, fitted)
    model = make_step_model(f"fit:{path}", MODEL, GPU)
    errors = []
    for p in held:
        decodes, _, prefills = point_batch(p)
        batch = [(1, p["decode_context"])] * decodes + prefills
        gpu = model.predict(batch)
        errors.append(abs((gpu.attention_s + gpu.linear_s) / p["graph_s"] - 1))
    assert float(np.median(errors)) < 0.03
    assert model.description.startswith(f"fit: {path} ({len(fitted)} points of Llama-3-8B")


def test_fit_refuses_another_model_and_names_the_file(tmp_path: Path) -> None:
    path = _artefact(tmp_path, _points(0.0), "Qwen2.5-7B")
    with pytest.raises(ValueError, match=r"cal.json was measured for Qwen2.5-7B.*calibrated"):
        make_step_model(f"fit:{path}", MODEL, GPU)
    with pytest.raises(ValueError, match="not a pagedsim-step-calibration file"):
        (tmp_path / "x.json").write_text("{}")
        make_step_model(f"fit:{tmp_path / 'x.json'}", MODEL, GPU)


def test_auto_without_a_matching_calibration_is_the_calibrated_roofline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto for a model and GPU no artefact measured is the calibrated roofline, a prediction,
    and says why; with nothing shipped at all it is the plain roofline."""
    from sim.cost import calibration

    step = make_step_model("auto", get_model("OPT-13B"), get_gpu("A100-80GB"))
    assert isinstance(step, ExtendedStepModel) and isinstance(step.base, FitStepModel)
    assert step.description.startswith("calibrated roofline: efficiencies and floors fitted on")
    assert "a prediction for this GPU" in step.description
    assert "(a prediction: no shipped calibration for OPT-13B" in step.description
    monkeypatch.setattr(calibration, "SHIPPED_DIR", tmp_path)
    step = make_step_model("auto", get_model("OPT-13B"), get_gpu("A100-80GB"))
    assert isinstance(step, ExtendedStepModel) and isinstance(step.base, RooflineStepModel)
    assert "uncalibrated" in step.description and "OPT-13B" in step.description
    assert make_step_model("roofline", MODEL, GPU).description.startswith("roofline; CPU 2 ms")


def test_padding_follows_capture_sizes() -> None:
    assert [padded_tokens(n) for n in (1, 3, 9, 255, 257, 512, 513)] == [1, 4, 16, 256, 272,
                                                                          512, 513]


def _waves_by_hand(prefills: list[tuple[int, int]], heads: int, head_dim: int, sms: int,
                   window: int | None) -> int:
    """Every query-tile program listed, heaviest first, cut into waves of the resident slots:
    the sum of each wave's heaviest program's key tiles."""
    block_m, block_n = prefill_tile(head_dim)
    programs = []
    for new, prefix in prefills:
        if new <= 16:
            continue
        for start in range(0, new, block_m):
            keys = prefix + min(start + block_m, new)
            keys = keys if window is None else min(keys, window + block_m)
            programs += [int(np.ceil(keys / block_n))] * heads
    programs.sort(reverse=True)
    slots = PROGRAMS_PER_SM * sms
    return sum(max(programs[i:i + slots]) for i in range(0, len(programs), slots))


def test_tile_waves_counts_the_critical_path() -> None:
    """A short chunk over a long prefix is one wave of 65 key tiles (4,128 keys / 64), as long
    as a 2,048-token chunk with no prefix is 48 (waves led by 32 and 16 tiles); split-K
    chunks (<= 16 new tokens) have none; random batches match the program-by-program count."""
    assert tile_waves([(32, 4096)], 32, 128, 132, None) == 65
    assert tile_waves([(2048, 0)], 32, 128, 132, None) == 32 + 16
    assert tile_waves([(16, 8192)], 32, 128, 132, None) == 0
    rng = random.Random(1)
    for _ in range(200):
        prefills = [(rng.choice((8, 17, 100, 128, 129, 700, 2048, 5000)),
                     rng.choice((0, 1, 1000, 8192))) for _ in range(rng.randint(1, 4))]
        args = (rng.choice((8, 28, 32, 40)), rng.choice((64, 128, 256)),
                rng.choice((58, 108, 132)), rng.choice((None, 4096)))
        assert tile_waves(prefills, *args) == _waves_by_hand(prefills, *args)


def test_fit_needs_the_waves_term_for_short_chunks_over_long_prefixes() -> None:
    """Prefill attention made of launch floors, bytes, FLOPs and key tiles on the critical
    path: the fit recovers the seconds per key tile; without that column no mix of the other
    terms prices both a 32-token chunk over 8,192 cached tokens and a 4,096-token chunk."""
    roof, col = RooflineStepModel(MODEL, GPU), TERMS.index("waves")
    rows, times = [], []
    for new in (32, 96, 256, 512, 1024, 2048, 4096):
        for prefix in (0, 1024, 8192):
            kind, parts = features(roof, 0, 0, [(new, prefix)])
            assert kind == "prefill" and parts[0][col] > 0
            rows.append(parts[0])
            times.append(float(np.dot([8e-6, 1 / 0.7, 1 / 0.9, 0.0, 2e-6, 0.0, 0.0], parts[0])))
    x, y = np.array(rows), np.array(times)
    coef = fit_nonnegative(x, y)
    assert coef[col] == pytest.approx(2e-6, rel=1e-6)
    x[:, col] = 0.0
    worst = float(np.abs(x @ fit_nonnegative(x, y) / y - 1).max())
    assert worst > 0.15


def test_expert_column_splits_the_linear_bytes() -> None:
    """The linear part's `expert` column is the roofline's routed-expert read seconds and
    `mem` the rest, so the two add up to the roofline's linear memory; a dense model's is 0."""
    mem, expert = TERMS.index("mem"), TERMS.index("expert")
    for name, routed in (("Llama-3-8B", False), ("Mixtral-8x7B", True), ("Qwen3-30B-A3B", True)):
        roof = RooflineStepModel(get_model(name), GPU)
        for decodes, prefills in ((1, []), (64, []), (0, [(2048, 0)]), (8, [(256, 1024)])):
            _, parts = features(roof, decodes, decodes * 1024, prefills)
            rows = padded_tokens(decodes + sum(n for n, _ in prefills))
            total, _ = roof.linear_terms(rows, decodes + len(prefills))
            assert parts[1][mem] + parts[1][expert] == pytest.approx(total, rel=1e-12)
            assert (parts[1][expert] > 0) == routed
            assert parts[0][expert] == parts[2][expert] == 0.0


def test_linear_curve_interpolates_and_holds_its_ends() -> None:
    """Between row counts the ratio is linear; outside them it is the nearest end's; an empty
    curve is 1 everywhere."""
    from sim.cost.step_fit import LinearCurve

    curve = LinearCurve((16, 48, 512), (1.0, 1.2, 0.9))
    assert curve(16) == 1.0 and curve(48) == 1.2 and curve(512) == 0.9
    assert curve(32) == pytest.approx(1.1)
    assert curve(1) == 1.0 and curve(4096) == 0.9
    assert LinearCurve()(300) == 1.0


def test_fit_curve_keeps_a_bump_seen_twice_and_ignores_one_seen_once(tmp_path: Path) -> None:
    """Noise-free points whose linear part runs 25 % slow at 512 rows (two shapes) and at 1,000
    (one shape): the curve bends up at 512 (by what the refitted terms do not already absorb),
    holds 1 at 1,000 (one shape is not trusted over the fit) and stays near 1 elsewhere;
    the 512-row steps are then predicted to within 2 %."""
    from sim.cost.step_fit import CURVE_MIN_POINTS, FitStepModel

    assert CURVE_MIN_POINTS == 2
    points = _points(0.0)
    extra = [(0, 0, 512, 0), (0, 0, 512, 4096), (0, 0, 1000, 64)]
    roof = RooflineStepModel(MODEL, GPU)
    for b, c, n, p in extra:
        point = {"num_decode": b, "decode_context": c, "prefill_new": n, "prefill_prefix": p}
        kind, rows = features(roof, *point_batch(point))
        parts = [float(np.dot(TRUE[kind][i], rows[i])) * (1.25 if i else 1.0) for i in range(3)]
        points.append({**point, "kind": kind, "attention_s": parts[0], "linear_s": parts[1],
                       "other_s": parts[2], "graph_s": 0.97 * sum(parts)})
    data = samples(read_calibration(_artefact(tmp_path, points)))
    flat = fit_coefficients(data)
    assert flat.curve == {}
    coef = fit_coefficients(data, curve=True)
    curve = coef.curve["prefill"]
    assert coef.curve["mixed"] is curve and coef.curve["decode"].rows == ()
    assert 1.15 < curve(512) < 1.25
    assert curve(1000) == 1.0
    assert all(0.95 < r < 1.05 for row, r in zip(curve.rows, curve.ratio) if row != 512)
    curved, plain = FitStepModel(MODEL, GPU, 1, coef, "fit"), FitStepModel(MODEL, GPU, 1, flat, "")
    for want in points[-3:-1]:
        prefills = [(want["prefill_new"], want["prefill_prefix"])]
        got = sum(curved.gpu_parts(0, 0, prefills)[1:])
        measured = coef.ratio["prefill"] * (want["linear_s"] + want["other_s"])
        assert got == pytest.approx(measured, rel=0.02)
        assert sum(plain.gpu_parts(0, 0, prefills)[1:]) < 0.9 * got


def test_a_prefill_bump_stays_off_decodes_of_the_same_rows(tmp_path: Path) -> None:
    """Prefills of 40 tokens (two shapes) whose linear part runs 20 % slow, and no decode
    measured at 40 rows: the prefill and mixed curve bends there, the decode curve does not,
    so a decode of 40 sequences is priced as its kind's terms say (one curve for every kind
    put the prefill's bump on it)."""
    from sim.cost.step_fit import FitStepModel

    points = _points(0.0)
    roof = RooflineStepModel(MODEL, GPU)
    for b, c, n, p in ((0, 0, 40, 0), (0, 0, 40, 1024)):
        point = {"num_decode": b, "decode_context": c, "prefill_new": n, "prefill_prefix": p}
        kind, rows = features(roof, *point_batch(point))
        parts = [float(np.dot(TRUE[kind][i], rows[i])) * (1.2 if i else 1.0) for i in range(3)]
        points.append({**point, "kind": kind, "attention_s": parts[0], "linear_s": parts[1],
                       "other_s": parts[2], "graph_s": 0.97 * sum(parts)})
    coef = fit_coefficients(samples(read_calibration(_artefact(tmp_path, points))), curve=True)
    assert coef.curve["prefill"](40) > 1.1 and coef.curve["decode"](40) == 1.0
    kind, rows = features(roof, 40, 40 * 1024, [])
    want = 0.97 * sum(float(np.dot(TRUE[kind][i], rows[i])) for i in range(3))
    got = sum(FitStepModel(MODEL, GPU, 1, coef, "fit").gpu_parts(40, 40 * 1024, []))
    assert got == pytest.approx(want, rel=0.02)


def test_lone_row_counts_count_where_a_neighbour_agrees(tmp_path: Path) -> None:
    """Three neighbouring row counts (336, 352, 368), each run by one shape, all 20 % slow: a
    smooth bump, kept at each (every lone value has an agreeing neighbour); a fourth lone count
    (1,000 rows) 20 % slow between row counts that run as fitted: a spike seen once, held at 1.
    """
    points = _points(0.0)
    roof = RooflineStepModel(MODEL, GPU)
    for n, slow in ((336, 1.2), (352, 1.2), (368, 1.2), (1000, 1.2), (960, 1.0), (1024, 1.0)):
        point = {"num_decode": 0, "decode_context": 0, "prefill_new": n, "prefill_prefix": 0}
        kind, rows = features(roof, *point_batch(point))
        parts = [float(np.dot(TRUE[kind][i], rows[i])) * (slow if i else 1.0) for i in range(3)]
        points.append({**point, "kind": kind, "attention_s": parts[0], "linear_s": parts[1],
                       "other_s": parts[2], "graph_s": 0.97 * sum(parts)})
    curve = fit_coefficients(samples(read_calibration(_artefact(tmp_path, points))),
                             curve=True).curve["prefill"]
    assert all(1.12 < curve(n) < 1.25 for n in (336, 352, 368))
    assert curve(1000) == 1.0


def test_shipped_artefact_matches_across_sliding_windows_only() -> None:
    """A model that differs from a shipped artefact's only in its sliding window takes that
    artefact (the window enters through the keys attention reads); another layer count not."""
    import dataclasses

    from sim.cost.calibration import find_shipped

    base = get_model("Mistral-7B")
    assert find_shipped(base, GPU, 1, "auto") is not None
    assert find_shipped(dataclasses.replace(base, sliding_window=256), GPU, 1, "auto") is not None
    assert find_shipped(dataclasses.replace(base, sliding_window=None), GPU, 1, "auto") is not None
    assert find_shipped(dataclasses.replace(base, num_layers=base.num_layers + 1), GPU, 1,
                        "auto") is None
