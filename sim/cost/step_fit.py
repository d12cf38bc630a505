"""The fitted step model ('fit', 'fit:FILE') and the calibrated roofline ('calibrated').

`fit_coefficients` fits the terms of sim/cost/fit_terms.py on the points of one or more
calibration artefacts (executed steps, sim/cost/calibration.py): per step kind (decode,
prefill, mixed) and part, the efficiencies, the floor per launch and the cost per sequence;
then per kind the median ratio of the whole step's graph time to its parts' sum (their
overlap). A kind with fewer than MIN_POINTS points borrows the coefficients fitted on all.
With `curve` (the per-shape 'fit'), the linear and other parts are then multiplied by a
measured correction over the rows they run (`LinearCurve`): what GEMM libraries do at
particular row counts (cuBLAS's tile waves, fast at 512 rows and slow just above; torch's
grouped GEMM switching tiles at 128 rows per expert, Mixtral's bump at 480-512 tokens)
follows no byte or FLOP count, only the artefact's own points. 'calibrated' has no curve.
A point's features are the roofline's at the artefact's KV cache dtype (fp8: a byte a value).
'fit' uses the artefact measured for this model shape, GPU and KV cache dtype; 'calibrated'
fits all shipped artefacts together and applies their efficiencies and floors to any model and
GPU (each GPU's datasheet peaks): a prediction where nothing was measured. `overhead_s` keeps
the roofline's CPU-side estimate; the GPU figures are what the executor measured (our kernels,
not vLLM's).
"""
from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from sim.cost.calibration import Calibration
from sim.cost.fit_terms import KINDS, PARTS, features, fit_nonnegative, linear_rows
from sim.cost.gpus import GpuSpec
from sim.cost.model_config import ModelConfig
from sim.cost.step_base import (
    DEFAULT_PER_SEQ_OVERHEAD_S,
    DEFAULT_STEP_OVERHEAD_S,
    ZERO_STEP,
    StepModel,
    StepTime,
)
from sim.cost.step_roofline import RooflineStepModel

MIN_POINTS = 6
# The linear curve's value at a row count: the median measured / fitted ratio of its fitted
# shapes where at least CURVE_MIN_POINTS ran it; where one shape did (one measurement, within
# run-to-run noise of the fit, ~5 % on the H200), the median of its ratio and those of the
# nearest measured row counts below and above, so that a lone point counts only where a
# neighbour agrees (the smooth bumps of grouped GEMMs keep it, a lone noisy point or a spike
# seen once does not). A value within CURVE_MIN_MISS of 1 is 1 (benchmarks/RESULTS.md,
# "A linear curve over rows" and "Lone row counts").
CURVE_MIN_MISS = 0.03
CURVE_MIN_POINTS = 2


@dataclass(frozen=True, slots=True)
class LinearCurve:
    """Measured / fitted time of the linear and other parts as a function of the rows they
    run (tokens padded to a capture size): at each row count of the fitted points the median
    ratio, linearly interpolated between them and held at the ends; empty: 1 everywhere."""

    rows: tuple[int, ...] = ()
    ratio: tuple[float, ...] = ()

    def __call__(self, rows: int) -> float:
        xs = self.rows
        if not xs:
            return 1.0
        i = bisect.bisect_left(xs, rows)
        if i == 0:
            return self.ratio[0]
        if i == len(xs):
            return self.ratio[-1]
        if xs[i] == rows:
            return self.ratio[i]
        x0, x1, y0, y1 = xs[i - 1], xs[i], self.ratio[i - 1], self.ratio[i]
        return y0 + (y1 - y0) * (rows - x0) / (x1 - x0)


@dataclass(frozen=True, slots=True)
class Coefficients:
    """Per kind: one row of TERMS coefficients per part, and the graph / parts-sum ratio;
    the linear parts' correction over rows (`LinearCurve`, identity unless fitted)."""

    terms: dict[str, np.ndarray]
    ratio: dict[str, float]
    curve: LinearCurve = LinearCurve()


@dataclass(frozen=True, slots=True)
class Sample:
    """One executed point as the fit sees it."""

    kind: str
    rows: list[list[float]]
    parts: tuple[float, float, float]
    graph_s: float
    linear_rows: int = 0


def point_batch(point: dict[str, object]) -> tuple[int, int, list[tuple[int, int]]]:
    """(decodes, sum of decode contexts, prefill chunks) of an artefact point."""
    decodes, ctx = int(point["num_decode"]), int(point["decode_context"])  # type: ignore[call-overload]
    new, prefix = int(point["prefill_new"]), int(point["prefill_prefix"])  # type: ignore[call-overload]
    return decodes, decodes * ctx, [(new, prefix)] if new else []


def samples(cal: Calibration, points: Iterable[dict[str, object]] | None = None) -> list[Sample]:
    """The artefact's points (or the given subset) with parts measured, as fit samples."""
    roof = RooflineStepModel(cal.model, cal.gpu, kv_cache_dtype=cal.kv_cache_dtype)
    out = []
    for p in cal.points if points is None else points:
        parts = tuple(p.get(f"{part}_s") for part in PARTS)
        if any(not isinstance(v, float) or v <= 0 for v in parts):
            continue
        decodes, ctx_sum, prefills = point_batch(p)
        if roof.decode_context_cap is not None and decodes:
            ctx_sum = decodes * min(ctx_sum // decodes, roof.decode_context_cap)
        kind, rows = features(roof, decodes, ctx_sum, prefills)
        out.append(Sample(kind, rows, parts, float(p["graph_s"]),  # type: ignore[arg-type]
                          linear_rows(decodes, prefills)))
    return out


def _fit_parts(group: Sequence[Sample]) -> np.ndarray:
    return np.array([fit_nonnegative(np.array([s.rows[i] for s in group]),
                                     np.array([s.parts[i] for s in group]))
                     for i in range(len(PARTS))])


def _dot(coef: Sequence[float], values: Sequence[float]) -> float:
    return float(sum(c * v for c, v in zip(coef, values)))


def linear_curve(data: Sequence[Sample], terms: dict[str, np.ndarray]) -> LinearCurve:
    """The measured / fitted ratio of the linear plus other parts per row count (see
    CURVE_MIN_POINTS); identity where no row count misses by more than CURVE_MIN_MISS."""
    by_rows: dict[int, list[float]] = defaultdict(list)
    for s in data:
        fitted = _dot(terms[s.kind][1], s.rows[1]) + _dot(terms[s.kind][2], s.rows[2])
        if fitted > 0:
            by_rows[s.linear_rows].append((s.parts[1] + s.parts[2]) / fitted)
    rows = tuple(sorted(by_rows))
    med = [statistics.median(by_rows[r]) for r in rows]
    values = [m if len(by_rows[r]) >= CURVE_MIN_POINTS
              else statistics.median(med[i - 1:i + 2]) if 0 < i < len(rows) - 1 else 1.0
              for i, (r, m) in enumerate(zip(rows, med))]
    ratio = tuple(v if abs(v - 1) > CURVE_MIN_MISS else 1.0 for v in values)
    return LinearCurve(rows, ratio) if any(r != 1.0 for r in ratio) else LinearCurve()


def fit_coefficients(data: Sequence[Sample], *, curve: bool = False) -> Coefficients:
    """Fit every kind (see the module docstring); with `curve`, the linear parts' correction
    over rows too. Raises ValueError without samples."""
    if len(data) < MIN_POINTS:
        raise ValueError(f"a fit needs at least {MIN_POINTS} points with attention_s, "
                         f"linear_s and other_s measured; got {len(data)}")
    pooled = _fit_parts(data)
    terms, ratio = {}, {}
    for kind in KINDS:
        group = [s for s in data if s.kind == kind]
        terms[kind] = _fit_parts(group) if len(group) >= MIN_POINTS else pooled
        ratio[kind] = statistics.median(s.graph_s / sum(s.parts) for s in (group or data))
    return Coefficients(terms, ratio, linear_curve(data, terms) if curve else LinearCurve())


def predicted_graph_s(coef: Coefficients, sample: Sample) -> float:
    """The whole step's graph seconds `coef` gives a sample (no linear curve)."""
    terms = coef.terms[sample.kind]
    return sum(_dot(terms[i], sample.rows[i]) for i in range(len(PARTS))) * coef.ratio[sample.kind]


def scaled_to(coef: Coefficients, own: Sequence[Sample]) -> Coefficients:
    """`coef` with each kind's overlap ratio multiplied by the median measured / predicted
    graph time of that kind's samples in `own` (all of `own` for a kind it lacks): a GPU's
    own executed steps correcting a fit pooled over several GPUs (sim/cost/step_specs.py)."""
    if not own:
        return coef
    every = [s.graph_s / predicted_graph_s(coef, s) for s in own]
    scale = {kind: statistics.median([s.graph_s / predicted_graph_s(coef, s) for s in own
                                      if s.kind == kind] or every) for kind in KINDS}
    return Coefficients(coef.terms, {k: coef.ratio[k] * scale[k] for k in coef.ratio},
                        coef.curve)


class FitStepModel(StepModel):
    """Step time from fitted terms over the roofline's per-part quantities."""

    def __init__(self, model: ModelConfig, gpu: GpuSpec, tp: int, coef: Coefficients,
                 description: str, *, kv_cache_dtype: str = "auto",
                 overhead_s: float = DEFAULT_STEP_OVERHEAD_S,
                 per_seq_overhead_s: float = DEFAULT_PER_SEQ_OVERHEAD_S) -> None:
        self.roof = RooflineStepModel(model, gpu, tp, kv_cache_dtype=kv_cache_dtype)
        self.decode_context_cap = self.roof.decode_context_cap
        self.coef, self.description = coef, description
        # Plain floats: a numpy dot of four values per part costs more than the sums.
        self._terms = {kind: [[float(c) for c in row] for row in coef.terms[kind]]
                       for kind in coef.terms}
        self.overhead_s, self.per_seq_overhead_s = overhead_s, per_seq_overhead_s

    def gpu_parts(self, num_decode: int, sum_decode_context: int,
                  prefills: Sequence[tuple[int, int]]) -> tuple[float, float, float]:
        """Predicted (attention, linear, other) GPU seconds, the overlap ratio applied."""
        kind, rows = features(self.roof, num_decode, sum_decode_context, prefills)
        terms, ratio = self._terms[kind], self.coef.ratio[kind]
        att, lin, other = (sum(c * v for c, v in zip(terms[i], rows[i])) * ratio
                           for i in range(3))
        if self.coef.curve.rows:
            bend = self.coef.curve(linear_rows(num_decode, prefills))
            lin, other = lin * bend, other * bend
        return att, lin, other

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        num_seqs = num_decode + len(prefills)
        if num_seqs == 0:
            return ZERO_STEP
        att, lin, other = self.gpu_parts(num_decode, sum_decode_context, prefills)
        return StepTime(att, lin + other, self.overhead_s + self.per_seq_overhead_s * num_seqs)
