"""Numeric axis ranges of a sweep spec: ``{start, stop, step | factor | num}`` to values.

``step`` gives an arithmetic grid, ``factor`` a geometric one and ``num`` evenly spaced
points; ``stop`` is included when it falls on the grid. Integer inputs give integers (except
with ``num``); floats are rounded to 12 significant digits so that names stay stable.
"""
from __future__ import annotations

import math
from typing import Any

MAX_CELLS = 100_000
"""The most cells a spec may have (an axis is cut one value past it, to report the size)."""


def expand_range(start: float, stop: float, kind: str, by: float) -> list[Any]:
    """Range values, stop included when it falls on the grid (to 1e-9 relative)."""
    if stop < start:
        raise ValueError(f"stop {stop} is below start {start}")
    if kind == "step":
        if by <= 0:
            raise ValueError(f"step must be > 0, got {by}")
        count = math.floor((stop - start) / by * (1 + 1e-9) + 1e-9) + 1
        values = [start + i * by for i in range(min(count, MAX_CELLS + 1))]
    elif kind == "factor":
        if by <= 1 or start <= 0:
            raise ValueError(f"factor needs factor > 1 and start > 0, got {by} and {start}")
        count = math.floor(math.log(stop / start) / math.log(by) + 1e-9) + 1
        values = [start * by ** i for i in range(min(count, MAX_CELLS + 1))]
    else:
        if isinstance(by, float) or by < 1:
            raise ValueError(f"num must be an integer >= 1, got {by}")
        step = (stop - start) / (by - 1) if by > 1 else 0.0
        values = [start + i * step for i in range(min(by, MAX_CELLS + 1))]
    if all(isinstance(v, int) for v in (start, stop, by)) and kind != "num":
        return [int(v) for v in values]
    return [float(f"{v:.12g}") for v in values]
