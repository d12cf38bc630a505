"""sim/cost/calibration.py: an artefact matches a run only with the same KV cache dtype.

A bf16 artefact (no `model.kv_cache_dtype`, as the shipped ones before fp8, or "bfloat16") is
fitted for bf16-cache runs only, an fp8 one (`fp8_e4m3`) for `--kv-cache-dtype fp8` /
`fp8_e4m3` runs only; `auto` picks the matching shipped artefact or falls back to the calibrated roofline,
and its description says which.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sim.cost import calibration
from sim.cost.calibration import read_calibration, run_kv_dtype
from sim.cost.fit_terms import TERMS
from sim.cost.gpus import get_gpu
from sim.cost.models import get_model
from sim.cost.step_fit import samples
from sim.cost.step_model import make_step_model
from tests.unit.test_step_fit import _artefact, _points

MODEL, GPU = get_model("Llama-3-8B"), get_gpu("H200-141GB")


def _cal(tmp_path: Path, kv: str | None, file: str) -> Path:
    path = _artefact(tmp_path, _points(0.0), file=file)
    data = json.loads(path.read_text())
    if kv is not None:
        data["model"]["kv_cache_dtype"] = kv
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("kv", "runs", "not_runs"), [
    (None, ["auto", "bf16"], ["fp8", "fp8_e4m3", "fp8_e5m2", "fp16"]),
    ("bfloat16", ["auto", "bf16"], ["fp8", "fp8_e4m3"]),
    ("fp8_e4m3", ["fp8", "fp8_e4m3", "FP8"], ["auto", "bf16", "fp8_e5m2"]),
], ids=["bf16-no-field", "bf16", "fp8"])
def test_matches_compares_the_kv_cache_dtype(tmp_path: Path, kv: str | None, runs: list[str],
                                             not_runs: list[str]) -> None:
    cal = read_calibration(_cal(tmp_path, kv, "cal.json"))
    assert cal.kv_dtype == ("fp8_e4m3" if kv == "fp8_e4m3" else "bf16")
    for run in runs:
        assert cal.matches(MODEL, GPU, 1, run), run
    for run in not_runs:
        assert not cal.matches(MODEL, GPU, 1, run), run
    assert not cal.matches(MODEL, GPU, 2, runs[0])


def test_unknown_kv_field_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cal.json: field 'model.kv_cache_dtype' = 'int4'"):
        read_calibration(_cal(tmp_path, "int4", "cal.json"))


def test_run_kv_names() -> None:
    assert [run_kv_dtype(MODEL, k) for k in ("auto", "bf16", "fp8", "fp8_e4m3")] == \
        ["bf16", "bf16", "fp8_e4m3", "fp8_e4m3"]


def test_fp8_features_read_one_byte_per_value(tmp_path: Path) -> None:
    """The fit's attention memory term of an fp8 artefact's decode points is the roofline's at
    one byte per cached value: about half the bf16 artefact's for the same points."""
    bf16 = samples(read_calibration(_cal(tmp_path, None, "a.json")))
    fp8 = samples(read_calibration(_cal(tmp_path, "fp8_e4m3", "b.json")))
    mem = TERMS.index("mem")
    decodes = [(b, f) for b, f in zip(bf16, fp8) if b.kind == "decode"]
    assert len(decodes) == 36
    assert all(0.5 <= f.rows[0][mem] / b.rows[0][mem] < 0.52 for b, f in decodes)
    assert all(f.rows[1] == b.rows[1] for b, f in decodes)  # the GEMMs are the same


@pytest.fixture
def shipped_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "shipped"
    folder.mkdir()
    monkeypatch.setattr(calibration, "SHIPPED_DIR", folder)
    return folder


def test_auto_uses_the_artefact_of_the_runs_kv_dtype(shipped_dir: Path) -> None:
    """With a bf16 and an fp8 artefact shipped, auto fits the one of the run's cache dtype."""
    _cal(shipped_dir, None, "h200_llama_bf16.json")
    _cal(shipped_dir, "fp8_e4m3", "h200_llama_fp8.json")
    bf16 = make_step_model("auto", MODEL, GPU).description
    fp8 = make_step_model("auto", MODEL, GPU, kv_cache_dtype="fp8").description
    assert bf16.startswith("fit: sim/cost/calibrations/h200_llama_bf16.json (")
    assert "more" not in bf16 and "kv" not in bf16.split(")")[0]
    assert fp8.startswith("fit: sim/cost/calibrations/h200_llama_fp8.json (")
    assert "of Llama-3-8B, kv fp8_e4m3 on" in fp8 and "more" not in fp8


def test_auto_without_an_fp8_artefact_is_the_calibrated_roofline(shipped_dir: Path) -> None:
    """Only a bf16 artefact shipped: an fp8 run falls back to the calibrated roofline (fitted
    on the bf16 artefact) and says why; 'fit' refuses, naming the cache dtype; fit:FILE of the
    bf16 file is refused too."""
    path = _cal(shipped_dir, None, "h200_llama_bf16.json")
    step = make_step_model("auto", MODEL, GPU, kv_cache_dtype="fp8")
    assert step.description.startswith("calibrated roofline: efficiencies and floors fitted on "
                                       "Llama-3-8B on H200-141GB")
    assert "(a prediction: no shipped calibration for Llama-3-8B (bf16, kv fp8_e4m3) on" in \
        step.description
    with pytest.raises(ValueError, match=r"no shipped calibration .* kv fp8_e4m3"):
        make_step_model("fit", MODEL, GPU, kv_cache_dtype="fp8")
    with pytest.raises(ValueError, match=r"measured for Llama-3-8B \(bf16, kv bf16\).*kv "
                                         r"fp8_e4m3"):
        make_step_model(f"fit:{path}", MODEL, GPU, kv_cache_dtype="fp8")


def test_calibrated_fits_fp8_and_16_bit_caches_apart(shipped_dir: Path) -> None:
    """'calibrated' takes the artefacts of the run's kind of cache: an fp8 run the fp8 ones, a
    bf16 run the others; with no fp8 artefact an fp8 run takes them all."""
    _cal(shipped_dir, None, "h200_llama_bf16.json")
    only16 = make_step_model("calibrated", MODEL, GPU, kv_cache_dtype="fp8").description
    assert "fitted on Llama-3-8B on" in only16
    _cal(shipped_dir, "fp8_e4m3", "h200_llama_fp8.json")
    fp8 = make_step_model("calibrated", MODEL, GPU, kv_cache_dtype="fp8").description
    bf16 = make_step_model("calibrated", MODEL, GPU).description
    assert "fitted on Llama-3-8B (kv fp8) on" in fp8
    assert "fitted on Llama-3-8B on" in bf16 and "kv fp8" not in bf16


def _on(path: Path, device: str) -> Path:
    data = json.loads(path.read_text())
    data["device"]["name"] = device
    path.write_text(json.dumps(data))
    return path


def test_calibrated_pool_by_gpu(shipped_dir: Path) -> None:
    """The H200 has two model shapes shipped: 'calibrated' on it fits those alone for prefill
    and mixed steps, and the whole pool scaled to its steps for decode. The H100 has one: the
    whole pool, scaled to its steps. The A100 has none: the whole pool, a prediction. The kind
    of cache comes first: an fp8 run on the H100 takes the H200's fp8 artefact rather than the
    H100's bf16 one."""
    _cal(shipped_dir, None, "h200_llama.json")
    path = _artefact(shipped_dir, _points(0.0, name="Qwen3-14B"), "Qwen3-14B", "h200_qwen.json")
    assert read_calibration(path).gpu_name == "H200-141GB"
    _on(_cal(shipped_dir, None, "h100_llama.json"), "NVIDIA H100 80GB HBM3")
    _cal(shipped_dir, "fp8_e4m3", "h200_llama_fp8.json")
    h100, a100 = get_gpu("H100-80GB"), get_gpu("A100-80GB")

    def pool(gpu: object, kv: str = "auto") -> str:
        text = make_step_model("calibrated", MODEL, gpu, kv_cache_dtype=kv).description
        return text.split("floors fitted on ")[1].split("; CPU")[0]

    assert pool(GPU) == ("Llama-3-8B, Qwen3-14B on H100-80GB, H200-141GB; prefill and mixed "
                         "steps from H200-141GB's own, decode steps from every GPU's, scaled "
                         "to H200-141GB's")
    assert pool(h100) == ("Llama-3-8B, Qwen3-14B on H100-80GB, H200-141GB; scaled to "
                          "H100-80GB's own steps")
    assert pool(a100) == ("Llama-3-8B, Qwen3-14B on H100-80GB, H200-141GB; a prediction for "
                          "this GPU")
    assert pool(h100, "fp8") == "Llama-3-8B (kv fp8) on H200-141GB; a prediction for this GPU"


def test_calibrated_kinds_come_from_their_pools(shipped_dir: Path) -> None:
    """With two shapes on the H200 and one on the H100: the H200's prefill and mixed terms are
    the fit of its own artefacts, its decode terms the whole pool's scaled to its points; with
    the H200's artefacts alone shipped, every kind is their fit."""
    from sim.cost.step_fit import fit_coefficients, scaled_to
    from sim.cost.step_specs import calibrated_coefficients

    h200 = [read_calibration(_cal(shipped_dir, None, "h200_llama.json")),
            read_calibration(_artefact(shipped_dir, _points(0.0, name="Qwen3-14B"),
                                       "Qwen3-14B", "h200_qwen.json"))]
    path = _on(_artefact(shipped_dir, [dict(p, graph_s=p["graph_s"] * 1.3)
                                       for p in _points(0.0, name="Qwen3-14B")],
                         "Qwen3-14B", "h100_qwen.json"), "NVIDIA H100 80GB HBM3")
    h100 = read_calibration(path)
    mine = [s for c in h200 for s in samples(c)]
    alone = fit_coefficients(mine)
    whole = scaled_to(fit_coefficients(mine + samples(h100)), mine)
    coef, used, how = calibrated_coefficients([*h200, h100], GPU, False)
    assert len(used) == 3 and "decode steps from every GPU's" in how
    assert coef.ratio["decode"] == whole.ratio["decode"] != alone.ratio["decode"]
    assert (coef.terms["decode"] == whole.terms["decode"]).all()
    for kind in ("prefill", "mixed"):
        assert coef.ratio[kind] == alone.ratio[kind]
        assert (coef.terms[kind] == alone.terms[kind]).all()
    coef, used, how = calibrated_coefficients(h200, GPU, False)
    assert how == "" and len(used) == 2
    assert all(coef.ratio[k] == alone.ratio[k] for k in coef.ratio)


def test_moe_run_on_a_gpu_without_moe_files_takes_the_scaled_pool(shipped_dir: Path) -> None:
    """Two dense shapes on the H100 and an MoE one on the H200: a dense run on the H100 fits
    its prefill and mixed steps on the H100's files alone, an MoE run takes the whole pool
    scaled to the H100 for every kind (a fit without MoE points prices no expert reads)."""
    from sim.cost.fit_terms import TERMS
    from sim.cost.step_fit import fit_coefficients, scaled_to
    from sim.cost.step_specs import calibrated_coefficients

    h100 = [read_calibration(_on(_cal(shipped_dir, None, "h100_llama.json"),
                                 "NVIDIA H100 80GB HBM3")),
            read_calibration(_on(_artefact(shipped_dir, _points(0.0, name="Qwen3-14B"),
                                           "Qwen3-14B", "h100_qwen.json"),
                                 "NVIDIA H100 80GB HBM3"))]
    moe = read_calibration(_artefact(shipped_dir, _points(0.0, name="Qwen3-30B-A3B"),
                                     "Qwen3-30B-A3B", "h200_moe.json"))
    h100_gpu = get_gpu("H100-80GB")
    mine = [s for c in h100 for s in samples(c)]
    alone = fit_coefficients(mine)
    assert (alone.terms["prefill"][:, TERMS.index("expert")] == 0).all()
    whole = scaled_to(fit_coefficients(mine + samples(moe)), mine)
    dense, _, how = calibrated_coefficients([*h100, moe], h100_gpu, False)
    assert how.startswith("prefill and mixed steps from H100-80GB's own")
    assert (dense.terms["prefill"] == alone.terms["prefill"]).all()
    routed, used, how = calibrated_coefficients([*h100, moe], h100_gpu, False, moe=True)
    assert how == "scaled to H100-80GB's own steps (none of an MoE model)" and len(used) == 3
    for kind in routed.terms:
        assert (routed.terms[kind] == whole.terms[kind]).all()
        assert routed.ratio[kind] == whole.ratio[kind]
    assert (routed.terms["prefill"][:, TERMS.index("expert")] > 0).any()
    fp8 = read_calibration(_cal(shipped_dir, "fp8_e4m3", "h200_llama_fp8.json"))
    _, used, _ = calibrated_coefficients([*h100, moe, fp8], h100_gpu, True)
    assert used == [fp8]  # a dense fp8 run: the fp8 files
    _, used, _ = calibrated_coefficients([*h100, moe, fp8], h100_gpu, True, moe=True)
    assert len(used) == 4  # an MoE fp8 run: no fp8 file is MoE, so every file


def test_scaled_to_matches_a_gpus_own_steps(tmp_path: Path) -> None:
    """A pooled fit scaled to points 1.25x slower (decode) and 0.8x (the other kinds) predicts
    those points' graph times: the per-kind scale is the median measured / predicted."""
    from sim.cost.step_fit import fit_coefficients, predicted_graph_s, scaled_to

    data = samples(read_calibration(_cal(tmp_path, None, "a.json")))
    coef = fit_coefficients(data)
    slow = {"decode": 1.25, "prefill": 0.8, "mixed": 0.8}
    own = [dataclasses.replace(s, graph_s=predicted_graph_s(coef, s) * slow[s.kind])
           for s in data]
    scaled = scaled_to(coef, own)
    assert all(predicted_graph_s(scaled, s) == pytest.approx(s.graph_s) for s in own)
    assert scaled_to(coef, []) is coef


def test_shipped_files_are_read_and_fitted_once_until_they_change(
        shipped_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second run's step model reuses the first's reading and fit; a changed file (here a
    new point) is read and fitted again."""
    from sim.cost import step_specs

    path = _cal(shipped_dir, None, "h200_llama_bf16.json")
    fits = []
    real = step_specs.fit_shape
    monkeypatch.setattr(step_specs, "fit_shape", lambda data: fits.append(1) or real(data))
    first = calibration.shipped()
    a = make_step_model("auto", MODEL, GPU)
    assert calibration.shipped()[0] is first[0]
    b = make_step_model("auto", MODEL, GPU)
    assert len(fits) == 1 and b.description == a.description
    data = json.loads(path.read_text())
    data["points"].append(data["points"][0])
    path.write_text(json.dumps(data))
    assert calibration.shipped()[0] is not first[0]
    assert len(calibration.shipped()[0].points) == len(first[0].points) + 1
    make_step_model("auto", MODEL, GPU)
    assert len(fits) == 2
