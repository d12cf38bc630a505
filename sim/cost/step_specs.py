"""The calibrated step-model specs: 'fit:FILE', 'fit', 'calibrated' and 'auto' (the default).

- fit:FILE    fit the artefact FILE (refused unless measured for this model shape, GPU, model
              and KV cache dtypes and tp 1: one line naming the file).
- fit         the shipped artefact (sim/cost/calibrations/) measured for this setup.
- calibrated  the calibrated roofline: every shipped artefact fitted together, applied to this
              model on this GPU's datasheet peaks (a prediction wherever nothing was measured).
- auto        fit where a shipped artefact matches, else the plain roofline.
Every model built here carries a `description` the run prints.
"""
from __future__ import annotations

from sim.cost.calibration import find_shipped, read_calibration, run_kv_dtype, shipped
from sim.cost.gpus import GpuSpec
from sim.cost.model_config import ModelConfig
from sim.cost.step_base import StepModel
from sim.cost.step_fit import FitStepModel, fit_coefficients, samples
from sim.cost.step_roofline import RooflineStepModel

SPECS = ("fit", "calibrated", "auto")


def make_fit(arg: str, model: ModelConfig, gpu: GpuSpec, tp: int, kv_cache_dtype: str,
             spec: str) -> StepModel:
    """'fit:FILE' or 'fit' (the shipped artefact for this setup)."""
    kv = run_kv_dtype(model, kv_cache_dtype)
    if arg:
        cal = read_calibration(arg)
        if not cal.matches(model, gpu, tp, kv):
            raise ValueError(f"--step-model {spec!r}: {arg} was measured for {cal.model.name} "
                             f"({cal.model.dtype}, kv {cal.kv_dtype}) on {cal.gpu_name} at tp "
                             "1; this run uses "
                             f"{model.name} ({model.dtype}, kv {kv}) on {gpu.name} at tp {tp} "
                             "(use --step-model calibrated)")
    else:
        found = find_shipped(model, gpu, tp, kv)
        if found is None:
            raise ValueError(f"--step-model fit: no shipped calibration for {model.name} "
                             f"({model.dtype}, kv {kv}) on {gpu.name} at tp {tp} (use "
                             "--step-model calibrated, or fit:FILE)")
        cal = found
    coef = fit_coefficients(samples(cal), curve=True)
    return FitStepModel(model, gpu, tp, coef, f"fit: {cal.describe()}",
                        kv_cache_dtype=kv_cache_dtype)


def make_calibrated(model: ModelConfig, gpu: GpuSpec, tp: int,
                    kv_cache_dtype: str) -> StepModel:
    """The calibrated roofline from the shipped artefacts of the run's kind of KV cache: fp8
    caches (conversion-bound attention) and 16-bit ones are fitted apart, an fp8 run taking
    every artefact while no fp8 one is shipped."""
    cals = shipped()
    if not cals:
        raise ValueError("--step-model calibrated: no calibration is shipped in "
                         "sim/cost/calibrations/ (use roofline)")
    fp8 = run_kv_dtype(model, kv_cache_dtype).startswith("fp8")
    cals = [c for c in cals if c.kv_dtype.startswith("fp8") == fp8] or cals
    data = [s for cal in cals for s in samples(cal)]
    names = ", ".join(sorted({c.model.name + (" (kv fp8)" if c.kv_dtype.startswith("fp8")
                                              else "") for c in cals}))
    where = {c.gpu_name for c in cals}
    label = "" if where == {gpu.name} else "; a prediction for this GPU"
    return FitStepModel(model, gpu, tp, fit_coefficients(data),
                        f"calibrated roofline: efficiencies and floors fitted on {names} on "
                        f"{', '.join(sorted(where))}{label}", kv_cache_dtype=kv_cache_dtype)


def make_auto(model: ModelConfig, gpu: GpuSpec, tp: int, kv_cache_dtype: str) -> StepModel:
    """fit where a shipped artefact matches, else the plain roofline."""
    kv = run_kv_dtype(model, kv_cache_dtype)
    if find_shipped(model, gpu, tp, kv) is not None:
        return make_fit("", model, gpu, tp, kv_cache_dtype, "auto")
    roof = RooflineStepModel(model, gpu, tp, kv_cache_dtype=kv_cache_dtype)
    roof.description = (f"roofline (datasheet peaks, uncalibrated: no shipped calibration for "
                        f"{model.name} ({model.dtype}, kv {kv}) on {gpu.name} at tp {tp})")
    return roof
