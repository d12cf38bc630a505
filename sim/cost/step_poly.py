"""Polynomial step time: fitted coefficients over five batch features, per part.

JSON file format (coefficients in seconds per unit of the feature; absent ones are 0):
  {"format": "pagedsim-step-poly", "version": 1,
   "model": "Llama-3-8B", "gpu": "H200-141GB", "tp": 1,          (optional; checked if given)
   "attention": {"const": c, "num_seqs": c, "new_tokens": c, "context_tokens": c,
                 "new_x_context": c, "new_sq": c},
   "linear":    {...same keys...},
   "overhead":  {...same keys...}}                  (absent: the default step overheads)
Features over the scheduled sequences i: num_seqs = S, new_tokens = sum n_i, context_tokens =
sum c_i (window-capped like the roofline), new_x_context = sum n_i c_i, new_sq = sum n_i^2.
Each part is max(0, sum of coefficient x feature); predict and predict_split agree exactly.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sim.cost.gpus import GpuSpec
from sim.cost.models import ModelConfig
from sim.cost.step_base import (
    DEFAULT_PER_SEQ_OVERHEAD_S,
    DEFAULT_STEP_OVERHEAD_S,
    ZERO_STEP,
    StepModel,
    StepTime,
)
from sim.cost.step_match import check_measured_for

FEATURES = ("const", "num_seqs", "new_tokens", "context_tokens", "new_x_context", "new_sq")
PARTS = ("attention", "linear", "overhead")
FORMAT = "pagedsim-step-poly"

Coefficients = tuple[float, float, float, float, float, float]


def _coefficients(part: Any, where: str) -> Coefficients:
    if not isinstance(part, dict):
        raise ValueError(f"{where}: expected an object of coefficients")  # noqa: TRY004
    unknown = sorted(set(part) - set(FEATURES))
    if unknown:
        raise ValueError(f"{where}: unknown feature {unknown[0]!r}; known: {', '.join(FEATURES)}")
    values = []
    for key in FEATURES:
        value = part.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}.{key}: not a number: {value!r}")  # noqa: TRY004
        values.append(float(value))
    c0, c1, c2, c3, c4, c5 = values
    return (c0, c1, c2, c3, c4, c5)


def load_poly(path: str | Path) -> tuple[dict[str, Any], dict[str, Coefficients]]:
    """Read a poly coefficients file. Returns (its header fields, coefficients per part).

    Raises:
        ValueError: unreadable file, bad JSON or a bad field; the message names file and field.
    """
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{file}: cannot read: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{file}: field format must be {FORMAT!r}")
    if data.get("version") != 1:
        raise ValueError(f"{file}: field version must be 1, got {data.get('version')!r}")
    parts = {name: _coefficients(data[name], f"{file}: {name}")
             for name in PARTS if name in data}
    for name in ("attention", "linear"):
        if name not in parts:
            raise ValueError(f"{file}: missing field {name}")
    header = {key: data[key] for key in ("model", "gpu", "tp") if key in data}
    return header, parts


class PolyStepModel(StepModel):
    """Step time as a fitted polynomial of the batch features."""

    def __init__(self, parts: dict[str, Coefficients], *, window: int | None = None) -> None:
        default_overhead = (DEFAULT_STEP_OVERHEAD_S, DEFAULT_PER_SEQ_OVERHEAD_S, 0.0, 0.0, 0.0, 0.0)
        self._attention = parts["attention"]
        self._linear = parts["linear"]
        self._overhead = parts.get("overhead", default_overhead)
        self.decode_context_cap = None if window is None else window - 1

    @classmethod
    def from_file(cls, path: str | Path, model: ModelConfig, gpu: GpuSpec,
                  tp: int = 1) -> PolyStepModel:
        """Load `path`, refusing it when its model/gpu/tp header names another setup."""
        header, parts = load_poly(path)
        check_measured_for(str(path), header, model, gpu, tp)
        return cls(parts, window=model.sliding_window)

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        seqs = num_decode + len(prefills)
        if seqs == 0:
            return ZERO_STEP
        new = new_sq = num_decode
        context = new_x_context = sum_decode_context
        cap = self.decode_context_cap
        for n, c in prefills:
            c = c if cap is None or c < cap else cap
            new += n
            new_sq += n * n
            context += c
            new_x_context += n * c
        features = (1.0, seqs, new, context, new_x_context, new_sq)
        return StepTime(*(max(0.0, sum(k * f for k, f in zip(coef, features, strict=True)))
                          for coef in (self._attention, self._linear, self._overhead)))
