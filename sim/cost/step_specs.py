"""The calibrated step-model specs: 'fit:FILE', 'fit', 'calibrated' and 'auto' (the default).

- fit:FILE    fit the artefact FILE (refused unless measured for this model shape, GPU, model
              and KV cache dtypes and tp 1: one line naming the file).
- fit         the shipped artefact (sim/cost/calibrations/) measured for this setup.
- calibrated  the calibrated roofline: the shipped artefacts fitted together (per step kind,
              this GPU's own or all scaled to its own: `calibrated_coefficients`), applied to
              this model on this GPU's datasheet peaks (a prediction wherever nothing was
              measured).
- auto        fit where a shipped artefact matches, else the calibrated roofline (the plain
              roofline where nothing is shipped).
Every model built here carries a `description` the run prints.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.cost.calibration import (
    Calibration,
    find_shipped,
    read_calibration,
    run_kv_dtype,
    shipped,
    shipped_stamp,
)
from sim.cost.gpus import GpuSpec
from sim.cost.model_config import ModelConfig
from sim.cost.step_base import StepModel
from sim.cost.step_fit import (
    Coefficients,
    FitStepModel,
    fit_coefficients,
    fit_shape,
    samples,
    scaled_to,
)
from sim.cost.step_roofline import RooflineStepModel

SPECS = ("fit", "calibrated", "auto")
MIN_SHAPES = 2  # model shapes of one GPU that the calibrated roofline fits on their own
# Fitted coefficients of the shipped artefacts, per process (a run builds its step model once
# per allocator, a sweep once per cell; forked workers inherit what the parent fitted), keyed
# on the files' names, times and sizes. Coefficients are frozen and never changed by a model.
_FITTED: dict[tuple[Any, ...], Any] = {}


def _fitted(key: tuple[Any, ...], fit: Callable[[], Any]) -> Any:
    key = (shipped_stamp(), *key)
    if key not in _FITTED:
        if len(_FITTED) >= 64:
            _FITTED.clear()
        _FITTED[key] = fit()
    return _FITTED[key]


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
    coef = (fit_shape(samples(cal)) if arg else
            _fitted(("fit", cal.source, cal.model, cal.gpu_name, cal.kv_dtype),
                    lambda: fit_shape(samples(cal))))
    return FitStepModel(model, gpu, tp, coef, f"fit: {cal.describe()}",
                        kv_cache_dtype=kv_cache_dtype)


def calibrated_coefficients(cals: list[Calibration], gpu: GpuSpec, fp8: bool,
                            moe: bool = False) -> tuple[Coefficients, list[Calibration], str]:
    """The calibrated roofline's coefficients for a run on `gpu` (fp8 cache or not), the
    artefacts they come from, and how they were chosen (a phrase for the run's description).

    The pool is the artefacts of the run's kind of KV cache (fp8 caches are conversion-bound,
    16-bit ones are not); all artefacts where none is of that kind, or where the run is an MoE
    model and none of that kind is (a pool without MoE points prices no expert reads). Fractions of datasheet peaks
    do not carry between GPUs (the H200's decode reaches 65 % of its HBM peak, the H100's 73 %
    of its, with the same SMs and clock: benchmarks/RESULTS.md, "One H100 run"), and the terms
    need several model shapes (one shape cannot tell its weight reads from its launch floors).
    So, per step kind:
    - prefill and mixed: where `gpu` has artefacts of MIN_SHAPES model shapes, those alone;
      where it has fewer, or where the run is an MoE model (`moe`) and none of them is, the
      whole pool scaled to its own points (`scaled_to`): a fit without MoE points has no
      price for reading routed experts (its `expert` term is 0);
    - decode: the whole pool, scaled to `gpu`'s own decode points. Decode time is launch
      floors (equal on GPUs of equal SMs and clock) plus weight and KV reads (which scale with
      bandwidth); several GPUs' points separate the two where one GPU's few shapes do not.
      Held out, Qwen3-14B's decode on the H100 (whose other shapes are two of 7-8B) went
      from 11.6 % to 3.2 % median; on the H200, with five other shapes, dense decode moved by
      a point either way (benchmarks/RESULTS.md, "Decode from the whole pool");
    - where `gpu` has no artefact, the whole pool (a prediction)."""
    pool = [c for c in cals if c.kv_dtype.startswith("fp8") == fp8]
    if not pool or (moe and not any(c.model.moe for c in pool)):
        pool = cals
    own = [c for c in pool if c.gpu_name == gpu.name]
    mine = [s for c in own for s in samples(c)]
    scaled = scaled_to(fit_coefficients([s for c in pool for s in samples(c)]), mine)
    if not own:
        return scaled, pool, "a prediction for this GPU"
    shapes = {c.model for c in own}
    if len(shapes) < MIN_SHAPES:
        return scaled, pool, f"scaled to {gpu.name}'s own steps"
    if moe and not any(m.moe for m in shapes):
        return scaled, pool, f"scaled to {gpu.name}'s own steps (none of an MoE model)"
    alone = fit_coefficients(mine)
    if {c.gpu_name for c in pool} == {gpu.name}:
        return alone, own, ""
    coef = Coefficients({**alone.terms, "decode": scaled.terms["decode"]},
                        {**alone.ratio, "decode": scaled.ratio["decode"]},
                        offset={**alone.offset, "decode": scaled.offset.get("decode", 0.0)})
    return coef, pool, (f"prefill and mixed steps from {gpu.name}'s own, decode steps from "
                        f"every GPU's, scaled to {gpu.name}'s")


def make_calibrated(model: ModelConfig, gpu: GpuSpec, tp: int,
                    kv_cache_dtype: str) -> StepModel:
    """The calibrated roofline from the shipped artefacts (`calibrated_coefficients`)."""
    cals = shipped()
    if not cals:
        raise ValueError("--step-model calibrated: no calibration is shipped in "
                         "sim/cost/calibrations/ (use roofline)")
    fp8 = run_kv_dtype(model, kv_cache_dtype).startswith("fp8")
    coef, cals, how = _fitted(("calibrated", gpu, fp8, model.moe),
                              lambda: calibrated_coefficients(cals, gpu, fp8, model.moe))
    names = ", ".join(sorted({c.model.name + (" (kv fp8)" if c.kv_dtype.startswith("fp8")
                                              else "") for c in cals}))
    where = ", ".join(sorted({c.gpu_name for c in cals}))
    return FitStepModel(model, gpu, tp, coef,
                        f"calibrated roofline: efficiencies and floors fitted on {names} on "
                        f"{where}{'; ' + how if how else ''}", kv_cache_dtype=kv_cache_dtype)


def make_auto(model: ModelConfig, gpu: GpuSpec, tp: int, kv_cache_dtype: str) -> StepModel:
    """fit where a shipped artefact matches; else the calibrated roofline (on ten public vLLM
    runs no artefact was fitted on, it halves the plain roofline's TPOT and E2E errors:
    benchmarks/RESULTS.md); the plain roofline only where nothing is shipped."""
    kv = run_kv_dtype(model, kv_cache_dtype)
    if find_shipped(model, gpu, tp, kv) is not None:
        return make_fit("", model, gpu, tp, kv_cache_dtype, "auto")
    why = f"no shipped calibration for {model.name} ({model.dtype}, kv {kv}) on {gpu.name} at tp {tp}"
    if shipped():
        step = make_calibrated(model, gpu, tp, kv_cache_dtype)
        step.description += f" (a prediction: {why})"
        return step
    roof = RooflineStepModel(model, gpu, tp, kv_cache_dtype=kv_cache_dtype)
    roof.description = f"roofline (datasheet peaks, uncalibrated: {why})"
    return roof
