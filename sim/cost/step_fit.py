"""The fitted step model ('fit', 'fit:FILE') and the calibrated roofline ('calibrated').

`fit_coefficients` fits the terms of sim/cost/fit_terms.py on the points of one or more
calibration artefacts (executed steps, sim/cost/calibration.py): per step kind (decode,
prefill, mixed) and part, the efficiencies, the floor per launch and the cost per sequence
(the linear part of prefill and mixed steps on their points together, CHUNK_KINDS);
then per kind the whole step's graph time from its parts' sum (their overlap: the median
ratio, or for the per-shape 'fit' a ratio and an offset, `overlap`). A kind with fewer than
MIN_POINTS points borrows the coefficients fitted on all. With `curve` (the per-shape 'fit'),
the linear and other parts are then multiplied by a measured correction over the rows they
run, decode steps' own and one shared by prefill and mixed steps (`linear_curves`): what
GEMM libraries do at particular row counts (cuBLAS's tile waves, fast at 512 rows and slow
just above; torch's grouped GEMM switching tiles at 128 rows per expert, Mixtral's bump at
480-512 tokens) follows no byte or FLOP count, only the artefact's own points. 'calibrated' has no curve.
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
from dataclasses import dataclass, field

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
# Step kinds whose linear part is fitted on their points together. Their GEMMs run the same
# rows (the step's tokens) whether or not decodes are among them, and mixed points alone span
# few row counts: fitted apart, the mixed kind's linear terms, from points of at most 2,176
# tokens, priced the H200's steps of two 2,048-token prompts beside decodes 12-14 % fast,
# where a prefill of 4,096 tokens was priced within 4 % (benchmarks/RESULTS.md, "Long steps").
CHUNK_KINDS = ("prefill", "mixed")
LINEAR = PARTS.index("linear")
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
    """Per kind: one row of TERMS coefficients per part, the whole step's graph time as
    `ratio` x the parts' sum + `offset` seconds (`overlap`), and the linear parts'
    correction over rows (`LinearCurve`; a kind without one: identity)."""

    terms: dict[str, np.ndarray]
    ratio: dict[str, float]
    curve: dict[str, LinearCurve] = field(default_factory=dict)
    offset: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Sample:
    """One executed point as the fit sees it."""

    kind: str
    rows: list[list[float]]
    parts: tuple[float, float, float]
    graph_s: float
    linear_rows: int = 0


def point_batch(point: dict[str, object]) -> tuple[int, int, list[tuple[int, int]]]:
    """(decodes, sum of decode contexts, prefill chunks) of an artefact point: `num_prefill`
    chunks of `prefill_new` tokens over `prefill_prefix` (one where the field is absent)."""
    decodes, ctx = int(point["num_decode"]), int(point["decode_context"])  # type: ignore[call-overload]
    new, prefix = int(point["prefill_new"]), int(point["prefill_prefix"])  # type: ignore[call-overload]
    chunks = int(point.get("num_prefill", 1)) if new else 0  # type: ignore[call-overload]
    return decodes, decodes * ctx, [(new, prefix)] * chunks


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


def _fit_part(group: Sequence[Sample], part: int) -> np.ndarray:
    return fit_nonnegative(np.array([s.rows[part] for s in group]),
                           np.array([s.parts[part] for s in group]))


def _fit_parts(group: Sequence[Sample], linear: np.ndarray | None = None) -> np.ndarray:
    """Every part's terms fitted on `group`; the linear part's are `linear` where given."""
    return np.array([linear if i == LINEAR and linear is not None else _fit_part(group, i)
                     for i in range(len(PARTS))])


def _dot(coef: Sequence[float], values: Sequence[float]) -> float:
    return float(sum(c * v for c, v in zip(coef, values)))


def linear_curve(data: Sequence[Sample], terms: dict[str, np.ndarray]) -> LinearCurve:
    """The measured / fitted ratio of the linear plus other parts per row count (see
    CURVE_MIN_POINTS), for samples of one kind; identity where no row count misses by more
    than CURVE_MIN_MISS."""
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


def linear_curves(data: Sequence[Sample], terms: dict[str, np.ndarray]
                  ) -> dict[str, LinearCurve]:
    """Per kind, the `linear_curve` it is multiplied by: decode steps' from decode samples,
    prefill and mixed steps' from the samples of both. A curve is a residual of its kind's
    own terms, so one curve for every kind put the 5 % by which the H100's prefill fit prices
    32-row prefills low on its 32-sequence decodes, 3-9 % too slow as executed. Prefill and
    mixed steps run the same GEMMs at the row counts the capture grid gives both, and share
    their points: held out, a curve per kind, without that support, had a higher p90 than
    the shared one on six of 14 shapes (benchmarks/RESULTS.md, "The overlap of a step's
    parts")."""
    chunks = linear_curve([s for s in data if s.kind != "decode"], terms)
    return {"decode": linear_curve([s for s in data if s.kind == "decode"], terms),
            "prefill": chunks, "mixed": chunks}


def overlap(group: Sequence[Sample]) -> tuple[float, float]:
    """(ratio, offset): the whole step's graph seconds as `ratio` x its parts' sum + `offset`,
    least squares in relative error. The parts are timed each in its own graph: a small
    step's graph takes a little more than its parts (what no part holds: the embedding, the
    graph's own replay), a long prefill's parts sum to 2-5 % more than its graph (timed
    apart, they lose the overlap of neighbouring kernels), so one ratio over all sizes
    prices small steps low and long ones high; the shipped shapes fit ratios of 0.94-1.0
    and offsets of 0.1-1.5 ms (benchmarks/RESULTS.md, "The overlap of a step's
    parts"). With fewer than MIN_POINTS samples, or a fit that is not a positive ratio,
    the median ratio and no offset."""
    parts = np.array([sum(s.parts) for s in group])
    graph = np.array([s.graph_s for s in group])
    median = float(np.median(graph / parts))
    if len(group) < MIN_POINTS or np.ptp(parts) <= 0:
        return median, 0.0
    x = np.stack([parts / graph, 1.0 / graph], axis=1)
    (ratio, offset), *_ = np.linalg.lstsq(x, np.ones_like(graph), rcond=None)
    if not ratio > 0:
        return median, 0.0
    return float(ratio), float(offset)


def fit_coefficients(data: Sequence[Sample], *, curve: bool = False,
                     offset: bool = False) -> Coefficients:
    """Fit every kind (see the module docstring); with `curve`, the linear parts' correction
    over rows too; with `offset`, each kind's overlap as a ratio and an offset (`overlap`),
    else as the median ratio. Both are for one model shape's points: a step's fixed GPU cost
    and its row-count bumps follow that shape's layers, not byte or FLOP counts, so fits
    pooled over shapes ('calibrated') take neither (held out, the offset moved the pooled
    fits' errors by about a point either way). Raises ValueError without samples."""
    if len(data) < MIN_POINTS:
        raise ValueError(f"a fit needs at least {MIN_POINTS} points with attention_s, "
                         f"linear_s and other_s measured; got {len(data)}")
    pooled = _fit_parts(data)
    chunked = [s for s in data if s.kind in CHUNK_KINDS]
    chunk_linear = _fit_part(chunked, LINEAR) if len(chunked) >= MIN_POINTS else pooled[LINEAR]
    terms, ratio, shift = {}, {}, {}
    for kind in KINDS:
        group = [s for s in data if s.kind == kind]
        linear = chunk_linear if kind in CHUNK_KINDS else None
        if len(group) >= MIN_POINTS:
            terms[kind] = _fit_parts(group, linear)
        else:
            terms[kind] = pooled.copy()
            if linear is not None:
                terms[kind][LINEAR] = linear
        if offset:
            ratio[kind], shift[kind] = overlap(group if len(group) >= MIN_POINTS else data)
        else:
            ratio[kind] = statistics.median(s.graph_s / sum(s.parts) for s in (group or data))
            shift[kind] = 0.0
    return Coefficients(terms, ratio, linear_curves(data, terms) if curve else {}, shift)


def fit_shape(data: Sequence[Sample]) -> Coefficients:
    """The 'fit' of one model shape's points: its terms, its overlap with an offset and its
    linear curves (`fit_coefficients`)."""
    return fit_coefficients(data, curve=True, offset=True)


def predicted_graph_s(coef: Coefficients, sample: Sample) -> float:
    """The whole step's graph seconds `coef` gives a sample (no linear curve)."""
    terms = coef.terms[sample.kind]
    parts = sum(_dot(terms[i], sample.rows[i]) for i in range(len(PARTS)))
    return parts * coef.ratio[sample.kind] + coef.offset.get(sample.kind, 0.0)


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
                        coef.curve, {k: v * scale[k] for k, v in coef.offset.items()})


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
        self._offset = {kind: float(coef.offset.get(kind, 0.0)) for kind in coef.terms}
        self.overhead_s, self.per_seq_overhead_s = overhead_s, per_seq_overhead_s

    def gpu_parts(self, num_decode: int, sum_decode_context: int,
                  prefills: Sequence[tuple[int, int]]) -> tuple[float, float, float]:
        """Predicted (attention, linear, other) GPU seconds, the overlap applied (its offset
        counted in `other`)."""
        kind, rows = features(self.roof, num_decode, sum_decode_context, prefills)
        terms, ratio = self._terms[kind], self.coef.ratio[kind]
        att, lin, other = (sum(c * v for c, v in zip(terms[i], rows[i])) * ratio
                           for i in range(3))
        curve = self.coef.curve.get(kind)
        if curve is not None and curve.rows:
            bend = curve(linear_rows(num_decode, prefills))
            lin, other = lin * bend, other * bend
        return att, lin, other + self._offset[kind]

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        num_seqs = num_decode + len(prefills)
        if num_seqs == 0:
            return ZERO_STEP
        att, lin, other = self.gpu_parts(num_decode, sum_decode_context, prefills)
        return StepTime(att, lin + other, self.overhead_s + self.per_seq_overhead_s * num_seqs)
