"""Step-time models behind one interface, chosen by `--step-model`.

`predict(batch) -> StepTime(attention_s, linear_s, overhead_s)` with batch a sequence of
(new_tokens, context_tokens) per scheduled sequence; `predict_split(num_decode,
sum_decode_context, prefills)` is the same computation from running sums (step_base.py).
Specs: 'auto' (default: 'fit' where a shipped calibration matches, else 'roofline'),
'roofline' (options as 'roofline:hbm_eff=0.8,flops_eff=0.6,overhead_ms=2,per_seq_us=10'),
'fit', 'fit:FILE' and 'calibrated' (step_specs.py), 'poly:FILE' (step_poly.py) and
'table:FILE' (step_table.py). Every model's `description` says which one a run used.
"""
from __future__ import annotations

from sim.cost.capacity import KV_CACHE_DTYPES
from sim.cost.gpus import GpuSpec
from sim.cost.models import ModelConfig
from sim.cost.step_base import StepModel, StepTime, causal_pairs
from sim.cost.step_extras import ExtendedStepModel, Extras
from sim.cost.step_poly import PolyStepModel
from sim.cost.step_roofline import RooflineStepModel
from sim.cost.step_specs import make_auto, make_calibrated, make_fit
from sim.cost.step_table import TableStepModel

__all__ = [
    "PolyStepModel",
    "RooflineStepModel",
    "StepModel",
    "StepTime",
    "TableStepModel",
    "causal_pairs",
    "make_step_model",
]

# spec option -> (RooflineStepModel keyword, unit factor)
_ROOFLINE_OPTIONS = {"hbm_eff": ("hbm_efficiency", 1.0), "flops_eff": ("flops_efficiency", 1.0),
                     "overhead_ms": ("overhead_s", 1e-3),
                     "per_seq_us": ("per_seq_overhead_s", 1e-6)}


def _roofline_options(spec: str, text: str) -> dict[str, float]:
    options: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in _ROOFLINE_OPTIONS:
            raise ValueError(f"--step-model {spec!r}: unknown roofline option {item!r}; "
                             f"known: {', '.join(_ROOFLINE_OPTIONS)} (as key=value)")
        name, unit = _ROOFLINE_OPTIONS[key.strip()]
        try:
            options[name] = float(value) * unit
        except ValueError as exc:
            raise ValueError(f"--step-model {spec!r}: {key.strip()} needs a number") from exc
    return options


def make_step_model(spec: str, model: ModelConfig, gpu: GpuSpec, tp: int = 1, *,
                    kv_cache_dtype: str = "auto", extras: Extras | None = None) -> StepModel:
    """Build the step-time model named by `spec` for `model` on `tp` x `gpu`.

    Roofline and fitted models get the terms the GPU steps leave out (`extras`, default all on:
    sim/cost/step_extras.py).

    Raises:
        ValueError: unknown spec, bad option, unreadable or invalid file, or a poly/table file
            measured for another model, GPU or tp (one line naming the file).
    """
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r} not in {sorted(KV_CACHE_DTYPES)}")
    kind, _, arg = spec.strip().partition(":")
    kind = kind.strip().lower()
    step = _build(spec, kind, arg.strip(), model, gpu, tp, kv_cache_dtype)
    if not step.description:
        step.description = spec.strip()
    if kind in ("poly", "table"):  # measured files carry their own overhead terms
        return step
    return ExtendedStepModel(step, model, gpu, tp, extras or Extras())


def _build(spec: str, kind: str, arg: str, model: ModelConfig, gpu: GpuSpec, tp: int,
           kv_cache_dtype: str) -> StepModel:
    if kind == "roofline":
        return RooflineStepModel(model, gpu, tp, kv_cache_dtype=kv_cache_dtype,
                                 **_roofline_options(spec, arg))
    if kind in ("auto", "calibrated") and arg:
        raise ValueError(f"--step-model {spec!r}: {kind} takes no argument")
    if kind == "auto":
        return make_auto(model, gpu, tp, kv_cache_dtype)
    if kind == "calibrated":
        return make_calibrated(model, gpu, tp, kv_cache_dtype)
    if kind == "fit":
        return make_fit(arg, model, gpu, tp, kv_cache_dtype, spec)
    if kind in ("poly", "table") and not arg:
        raise ValueError(f"--step-model {spec!r}: {kind} needs a file, as {kind}:FILE")
    if kind == "poly":
        return PolyStepModel.from_file(arg, model, gpu, tp)
    if kind == "table":
        resolved = model.dtype if kv_cache_dtype == "auto" else kv_cache_dtype
        return TableStepModel.from_file(arg, model, gpu, tp, kv_cache_dtype=resolved)
    raise ValueError(f"--step-model {spec!r}: expected auto, roofline[:k=v,...], fit[:FILE], "
                     "calibrated, poly:FILE or table:FILE")
