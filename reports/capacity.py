"""Read a capacity-search directory (``python -m sim.sweep SPEC --capacity``) for the reports.

The directory holds ``capacity.json`` (settings, the other axes, one entry per search: an
allocator at one point of the axes, its capacity as rate_scale and requests/s, its status and
every probe as [rate_scale, metric]) and ``capacity/NAME/`` probe cells with the usual result
files, of which only one config.json is read (for the trace, model and GPU). ``load_capacity``
checks what the figures and tables use and raises ``ReportError`` naming the file otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports import schema as S
from reports.errors import ReportError
from reports.merge import run_context
from reports.readers import read_json

CAPACITY_FILE = "capacity.json"
CAPACITY_CELLS = "capacity"
SEARCH_KEYS = ("allocator", "status", "capacity_rate_scale", "probes")
STATUS_WORDS = {"ok": "found", "above_max": "above the largest rate tried",
                "below_min": "below the smallest rate tried", "failed": "failed"}


@dataclass(slots=True)
class CapacityResults:
    """One capacity search run: settings, searches (one per allocator and axis point)."""

    path: Path
    settings: dict[str, Any]
    axes: list[str]
    searches: list[dict[str, Any]]
    ratios: list[dict[str, Any]]
    context: dict[str, str]

    @property
    def slo(self) -> float:
        return float(self.settings["slo"])

    @property
    def metric(self) -> str:
        return str(self.settings.get("metric", S.NORM_LATENCY))

    def points(self) -> list[str]:
        """The axis points in first-seen order ("" when the search has no other axes)."""
        return list(dict.fromkeys(point_label(s, self.axes) for s in self.searches))


def is_capacity_dir(path: Path) -> bool:
    """True for a directory holding capacity.json."""
    return (path / CAPACITY_FILE).is_file()


def point_label(search: dict[str, Any], axes: list[str]) -> str:
    """"block_size=16, max_num_seqs=64" for a search's point of the other axes."""
    return ", ".join(f"{k}={search.get(k)}" for k in axes)


def load_capacity(path: Path) -> CapacityResults:
    """Read and check capacity.json (and one probe cell's config.json for the context).

    Raises:
        ReportError: a missing file, a missing key, or a malformed probe list.
    """
    file = path / CAPACITY_FILE
    data = read_json(file)
    settings, searches = data.get("settings"), data.get("searches")
    if not isinstance(settings, dict) or not isinstance(settings.get("slo"), (int, float)):
        raise ReportError(f"{file}: 'settings.slo' must be a number")
    if not isinstance(searches, list) or not searches:
        raise ReportError(f"{file}: 'searches' must be a non-empty list")
    for k, search in enumerate(searches):
        missing = [key for key in SEARCH_KEYS if not isinstance(search, dict) or key not in search]
        if missing:
            raise ReportError(f"{file}: searches[{k}] lacks {', '.join(missing)}")
        _check_probes(file, k, search["probes"])
    axes = [str(a) for a in data.get("axes") or []]
    ratios = [r for r in data.get("ratios") or [] if isinstance(r, dict)]
    return CapacityResults(path, settings, axes, searches, ratios, _context(path))


def _check_probes(file: Path, k: int, probes: Any) -> None:
    ok = isinstance(probes, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], (int, float))
        and (p[1] is None or isinstance(p[1], (int, float))) for p in probes)
    if not ok:
        raise ReportError(f"{file}: searches[{k}].probes must be [rate_scale, value] pairs")


def _context(path: Path) -> dict[str, str]:
    cells = path / CAPACITY_CELLS
    configs = sorted(cells.glob(f"*/{S.CONFIG_FILE}")) if cells.is_dir() else []
    return run_context(read_json(configs[0])) if configs else {}


def request_rate(search: dict[str, Any], rate_scale: float) -> float | None:
    """rate_scale in requests/s (the trace's base rate x rate_scale), None if unknown."""
    base = search.get("base_rate_req_s")
    return rate_scale * float(base) if isinstance(base, (int, float)) and base > 0 else None


def capacity_cell(search: dict[str, Any]) -> str:
    """A search's capacity for people: "23.7 req/s (x1.88)", ">= 1.3e+04 req/s", ..."""
    status, scale = search.get("status"), search.get("capacity_rate_scale")
    if status == "failed":
        return f"failed: {search.get('error') or 'no detail'}"
    if scale is None or (isinstance(scale, float) and math.isnan(scale)):
        return "below the smallest rate tried"
    rate = request_rate(search, float(scale))
    text = f"{rate:.3g} req/s (x{scale:.3g})" if rate is not None else f"x{scale:.3g}"
    return (">= " + text) if status == "above_max" else text
