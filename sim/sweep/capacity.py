"""Capacity search: the highest rate_scale at which an allocator still meets a latency SLO.

For each allocator (and each point of the spec's other axes) the search brackets, then
bisects, rate_scale, assuming the metric (mean normalised latency by default) rises with the
request rate:

    start ──pass──► 2x ──pass──► 4x ──miss──►   bracket [2, 4]     (doubling; halving on a miss)
    bisect: probe the midpoint, keep the half where pass turns into miss,
    stop when upper - lower <= tolerance x lower                   (relative tolerance)

The capacity is the last passing rate ``lower``; the true crossing lies in [lower, upper),
so it is known to within the tolerance. Searches for different allocators run in parallel,
one probe each per round; each probe is an ordinary sweep cell (so probes resume too).
Capacity in requests/s is the trace's base rate times rate_scale.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.sweep.backends import CellFn
from sim.sweep.cell import CellRunner, CellTask
from sim.sweep.spec import CapacitySettings, SweepSpec, cell_name, value_text
from sim.sweep.store import finished, save_record

SEARCH_AXES = ("rate_scale", "allocators")


@dataclass(slots=True)
class Bracket:
    """One search's state. Invariant: lower < upper whenever both are set."""

    settings: CapacitySettings
    lower: float | None = None
    upper: float | None = None
    probes: list[tuple[float, float | None]] = field(default_factory=list)

    def meets(self, value: float | None) -> bool:
        """A probe passes when its metric exists and is at most the SLO."""
        return value is not None and math.isfinite(value) and value <= self.settings.slo

    def next_rate(self) -> float | None:
        """The next rate_scale to probe, or None when the search is over."""
        s = self.settings
        if self.lower is None and self.upper is None:
            return s.start
        if self.upper is None:
            assert self.lower is not None
            return min(self.lower * 2, s.max_rate_scale) if self.lower < s.max_rate_scale \
                else None
        if self.lower is None:
            return max(self.upper / 2, s.min_rate_scale) if self.upper > s.min_rate_scale \
                else None
        if self.upper - self.lower <= s.tolerance * self.lower:
            return None
        return float(f"{(self.lower + self.upper) / 2:.10g}")

    def record(self, rate: float, value: float | None) -> None:
        """Add a probe's metric."""
        self.probes.append((rate, value))
        if self.meets(value):
            self.lower = rate if self.lower is None else max(self.lower, rate)
        else:
            self.upper = rate if self.upper is None else min(self.upper, rate)

    @property
    def status(self) -> str:
        """ok (bracketed), above_max, below_min, or searching."""
        if self.next_rate() is not None:
            return "searching"
        if self.upper is None:
            return "above_max"
        return "below_min" if self.lower is None else "ok"


def find_capacity(metric: Callable[[float], float | None],
                  settings: CapacitySettings) -> Bracket:
    """Run one search sequentially against ``metric(rate_scale)``."""
    bracket = Bracket(settings)
    while (rate := bracket.next_rate()) is not None:
        bracket.record(rate, metric(rate))
    return bracket


@dataclass(slots=True)
class Search:
    """One allocator at one point of the other axes."""

    params: dict[str, Any]
    allocator: str
    options: dict[str, Any]
    bracket: Bracket
    error: str | None = None

    def probe(self, rate: float) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """The probe cell's name, parameters and options."""
        params = {**self.params, "allocator": self.allocator, "rate_scale": rate}
        return cell_name(params), params, {**self.options, "rate_scale": rate}


def allocator_names(spec: SweepSpec, default: str) -> list[str]:
    """Allocators to search: the spec's (fixed or axis, in order) or simulate.py's default."""
    raw = spec.axes.get("allocators", [spec.options.get("allocators", default)])
    names: list[str] = []
    for value in raw:
        for name in value_text(value).split(","):
            if name.strip() and name.strip() not in names:
                names.append(name.strip())
    return names


def plan_searches(spec: SweepSpec, settings: CapacitySettings, default: str) -> list[Search]:
    """One search per allocator per cell of the other axes."""
    searches = []
    for cell in spec.cells(skip=SEARCH_AXES):
        options = {k: v for k, v in spec.cell_options(cell).items() if k != "rate_scale"}
        for name in allocator_names(spec, default):
            searches.append(Search(cell.params, name, {**options, "allocators": name},
                                   Bracket(settings)))
    return searches


def run_searches(searches: list[Search], root: Path, backend: Any, fn: CellFn,
                 runner: CellRunner, on_probe: Callable[[], None] = lambda: None) -> None:
    """Probe in rounds until every search is over; finished probes on disk are reused."""
    while True:
        tasks: list[CellTask] = []
        waiting: dict[str, tuple[Search, float]] = {}
        reused = 0
        for search in searches:
            rate = search.bracket.next_rate() if search.error is None else None
            if rate is None:
                continue
            name, params, options = search.probe(rate)
            record = finished(root, name, options)
            if record is not None:
                _apply(search, rate, record)
                on_probe()
                reused += 1
                continue
            tasks.append(CellTask(str(root), name, params, options, runner))
            waiting[name] = (search, rate)
        if not tasks and not reused:
            return
        for record in backend.run(fn, tasks):
            save_record(root, record)
            search, rate = waiting[record["name"]]
            _apply(search, rate, record)
            on_probe()


def _apply(search: Search, rate: float, record: dict[str, Any]) -> None:
    if record.get("status") != "ok":
        search.error = f"rate_scale {value_text(rate)}: {record.get('error')}"
        return
    entry = record["summary"].get("allocators", {}).get(search.allocator)
    if entry is None:
        search.error = f"rate_scale {value_text(rate)}: no summary for {search.allocator}"
        return
    search.bracket.record(rate, entry.get(search.bracket.settings.metric))


def result_rows(searches: list[Search], base_rates: dict[str, float | None]) -> list[dict[str, Any]]:
    """One row per search: capacity as rate_scale and as requests/s, bracket, status."""
    rows = []
    for s in searches:
        b, base = s.bracket, base_rates.get(cell_name(s.params))
        rows.append({
            **s.params, "allocator": s.allocator,
            "status": "failed" if s.error else b.status,
            "capacity_rate_scale": b.lower, "upper_rate_scale": b.upper,
            "capacity_req_s": b.lower * base if b.lower is not None and base else None,
            "base_rate_req_s": base, "num_probes": len(b.probes), "error": s.error,
            "probes": [[r, v] for r, v in b.probes],
        })
    return rows


def ratios(rows: list[dict[str, Any]], axes: list[str], top: str = "paged",
           bottom: str = "max") -> list[dict[str, Any]]:
    """capacity(top) / capacity(bottom) at each point of the other axes (the paper's
    paged-vs-Max comparison); None where either capacity is unknown."""
    out = []
    points: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        points.setdefault(cell_name({k: row[k] for k in axes}), {})[row["allocator"]] = row
    for by_name in points.values():
        if top in by_name and bottom in by_name:
            a, b = (by_name[top]["capacity_rate_scale"], by_name[bottom]["capacity_rate_scale"])
            params = {k: by_name[top][k] for k in axes}
            out.append({**params, "ratio": a / b if a and b else None,
                        "exact": by_name[top]["status"] == by_name[bottom]["status"] == "ok"})
    return out


def render(rows: list[dict[str, Any]], ratio_rows: list[dict[str, Any]], axes: list[str],
           settings: CapacitySettings) -> str:
    """The printed capacity table and the paged / max ratio."""
    head = (f"capacity: highest rate_scale with {settings.metric} <= {settings.slo:g} "
            f"(bisected to {settings.tolerance:.1%})")
    cols = [*axes, "allocator", "rate_scale", "req/s", "status", "probes"]
    table = [[*(value_text(r[k]) for k in axes), r["allocator"], _num(r["capacity_rate_scale"]),
              _num(r["capacity_req_s"]), r["status"], str(r["num_probes"])] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in table)) if table else len(c)
              for i, c in enumerate(cols)]
    lines = [head, "  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(t, widths)) for t in table]
    for r in ratio_rows:
        where = ", ".join(f"{k}={value_text(r[k])}" for k in axes)
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
        bound = "" if r["exact"] else " (a bound: a search hit its limit)"
        lines.append(f"paged / max capacity: {ratio}{' at ' + where if where else ''}{bound}")
    errors = [f"  {r['allocator']}: {r['error']}" for r in rows if r["error"]]
    return "\n".join(lines + (["failed searches:"] + errors if errors else []))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
