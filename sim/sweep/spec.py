"""The sweep specification: a TOML file naming fixed simulate.py options and axes to vary.

A sweep is the Cartesian product of its axes (in file order); each point is a *cell* whose
options are the fixed ones overlaid with the cell's axis values, and whose result directory
is named from those values (``rate_scale=2__block_size=16``), stable across runs and safe on
any filesystem. Every problem in the file raises ``SpecError`` with one line naming the file
and the key, which the command line prints before exiting with status 2.
"""
from __future__ import annotations

import difflib
import hashlib
import itertools
import math
import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.sweep.axes import MAX_CELLS, expand_range

SPEC_KEYS = ("description", "out", "options", "axes", "capacity")
RANGE_KEYS = ("values", "start", "stop", "step", "factor", "num")
RESERVED = {"out": "each cell writes its own directory under the sweep's --out",
            "progress": "the sweep shows one progress bar over cells",
            "jobs": "the sweep's own --jobs sets its worker processes"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._,+-]")


class SpecError(ValueError):
    """A bad sweep spec; the message is one line naming the file and the key."""


@dataclass(frozen=True, slots=True)
class Cell:
    """One point of the sweep: its directory name and its axis values (in axis order)."""

    name: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CapacitySettings:
    """How ``--capacity`` searches rate_scale (see sim/sweep/capacity.py).

    Attributes:
        slo: the largest acceptable value of ``metric`` (s/token for normalised latency).
        metric: the summary key compared with the SLO.
        start: the first rate_scale probed.
        tolerance: stop bisecting when (upper - lower) <= tolerance x lower.
        min_rate_scale: give up (capacity below this) when halving passes it.
        max_rate_scale: give up (capacity at least the last passing rate) past it.
    """

    slo: float = 0.2
    metric: str = "norm_latency_mean_s"
    start: float = 1.0
    tolerance: float = 0.02
    min_rate_scale: float = 1 / 64
    max_rate_scale: float = 1024.0

    def __post_init__(self) -> None:
        for name in ("slo", "start", "tolerance", "min_rate_scale", "max_rate_scale"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if not self.min_rate_scale <= self.start <= self.max_rate_scale:
            raise ValueError(f"start {self.start} must lie in [min_rate_scale "
                             f"{self.min_rate_scale}, max_rate_scale {self.max_rate_scale}]")


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """A parsed spec. ``options`` and ``axes`` use simulate.py's option names in snake_case
    (``trace`` is the positional TRACE, resolved against the spec's directory)."""

    path: Path
    options: dict[str, Any]
    axes: dict[str, list[Any]]
    capacity: CapacitySettings = field(default_factory=CapacitySettings)
    out: Path | None = None
    description: str = ""

    def cells(self, skip: Collection[str] = ()) -> list[Cell]:
        """Every cell, in product order; axes named in ``skip`` are left out."""
        keys = [k for k in self.axes if k not in skip]
        cells = []
        for values in itertools.product(*(self.axes[k] for k in keys)):
            params = dict(zip(keys, values))
            cells.append(Cell(cell_name(params), params))
        return cells

    def cell_options(self, cell: Cell) -> dict[str, Any]:
        """The options of one cell: fixed options overlaid with its axis values."""
        return {**self.options, **cell.params}


def value_text(value: Any) -> str:
    """A value as written in names and tables: integral floats drop ".0", lists join by ","."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return ",".join(value_text(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)


def value_token(key: str, value: Any) -> str:
    """Filesystem-safe text for a value; anything lossy gets a short hash of the exact text."""
    text = value_text(value)
    safe = Path(text).name if key == "trace" else text
    safe = _UNSAFE.sub("-", safe)
    if safe != text or len(safe) > 64:
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        safe = f"{safe[:48]}-{digest}"
    return safe


def cell_name(params: Mapping[str, Any]) -> str:
    """``key=value`` pairs joined by "__" in axis order; "base" for a sweep without axes."""
    return "__".join(f"{k}={value_token(k, v)}" for k, v in params.items()) or "base"


def load_spec(path: str | Path, known_options: Collection[str] | None = None) -> SweepSpec:
    """Read and check a spec file.

    Args:
        path: the TOML file.
        known_options: simulate.py's option names (snake_case); None skips the name check.

    Raises:
        SpecError: unreadable file, invalid TOML, or a bad key or value (one line).
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the sweep spec ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}") from None
    return parse_spec(doc, path, known_options)


def parse_spec(doc: dict[str, Any], path: Path,
               known_options: Collection[str] | None = None) -> SweepSpec:
    """Check a decoded spec document (see load_spec)."""
    for key in doc:
        if key not in SPEC_KEYS:
            raise SpecError(f"{path}: {key}: unknown key{_hint(key, SPEC_KEYS)} "
                            f"(expected {', '.join(SPEC_KEYS)})")
    options = _options(_table(doc, "options", path), path, known_options)
    axes_doc = _table(doc, "axes", path)
    axes = {}
    for raw_key, raw in axes_doc.items():
        key = _option_key(raw_key, f"axes.{raw_key}", path, known_options)
        if key in options:
            raise SpecError(f"{path}: axes.{raw_key}: also set in [options]; keep one")
        values = [_value(v, f"axes.{raw_key}", path) for v in _axis_values(raw, raw_key, path)]
        axes[key] = [_resolve_path(key, v, f"axes.{raw_key}", path) for v in values]
        _check_unique(key, axes[key], path)
    size = math.prod(len(v) for v in axes.values())
    if size > MAX_CELLS:
        raise SpecError(f"{path}: axes: {size} cells is more than {MAX_CELLS}")
    out = doc.get("out")
    if out is not None and not isinstance(out, str):
        raise SpecError(f"{path}: out: expected a path string, got {out!r}")
    return SweepSpec(path, options, axes, _capacity(_table(doc, "capacity", path), path),
                     path.parent / out if out else None, str(doc.get("description", "")))


def _table(doc: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise SpecError(f"{path}: {key}: expected a table ([{key}]), got {value!r}")
    return value


def _options(table: dict[str, Any], path: Path,
             known: Collection[str] | None) -> dict[str, Any]:
    options = {}
    for raw_key, raw in table.items():
        key = _option_key(raw_key, f"options.{raw_key}", path, known)
        where = f"options.{raw_key}"
        options[key] = _resolve_path(key, _value(raw, where, path), where, path)
    return options


def _option_key(raw: str, where: str, path: Path, known: Collection[str] | None) -> str:
    key = raw.replace("-", "_")
    if key in RESERVED:
        raise SpecError(f"{path}: {where}: not allowed in a sweep ({RESERVED[key]})")
    if known is not None and key not in known:
        raise SpecError(f"{path}: {where}: not a simulate.py option{_hint(key, known)} "
                        "(see simulate.py --help; write options in snake_case)")
    return key


def _hint(key: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _value(raw: Any, where: str, path: Path) -> Any:
    if isinstance(raw, list):
        return [_scalar(v, where, path) for v in raw]
    return _scalar(raw, where, path)


def _scalar(raw: Any, where: str, path: Path) -> Any:
    if isinstance(raw, float) and not math.isfinite(raw):
        raise SpecError(f"{path}: {where}: {raw} is not a finite number")
    if not isinstance(raw, (str, int, float, bool)):
        raise SpecError(f"{path}: {where}: expected a string, number or boolean, got {raw!r}")
    return raw


def _resolve_path(key: str, value: Any, where: str, path: Path) -> Any:
    if key != "trace":
        return value
    if not isinstance(value, str):
        raise SpecError(f"{path}: {where}: expected a path string, got {value!r}")
    return str((path.parent / Path(value).expanduser()).resolve())


def _axis_values(raw: Any, key: str, path: Path) -> list[Any]:
    where = f"axes.{key}"
    if isinstance(raw, list):
        values = raw
    elif isinstance(raw, dict):
        values = _range(raw, where, path)
    else:
        raise SpecError(f"{path}: {where}: expected a list or a table {{values = [...]}} or "
                        f"{{start, stop, step | factor | num}}, got {raw!r}")
    if not values:
        raise SpecError(f"{path}: {where}: no values")
    return values


def _range(table: dict[str, Any], where: str, path: Path) -> list[Any]:
    for key in table:
        if key not in RANGE_KEYS:
            raise SpecError(f"{path}: {where}.{key}: unknown range key{_hint(key, RANGE_KEYS)} "
                            f"(expected values, or start and stop with step, factor or num)")
    if "values" in table:
        if len(table) > 1 or not isinstance(table["values"], list):
            raise SpecError(f"{path}: {where}: 'values' must be a list and stand alone")
        return list(table["values"])
    kinds = [k for k in ("step", "factor", "num") if k in table]
    if len(kinds) != 1 or "start" not in table or "stop" not in table:
        raise SpecError(f"{path}: {where}: a range needs start, stop and exactly one of "
                        f"step, factor, num (got {', '.join(table) or 'nothing'})")
    nums = {k: table[k] for k in ("start", "stop", kinds[0])}
    for k, v in nums.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SpecError(f"{path}: {where}.{k}: expected a finite number, got {v!r}")
    try:
        return expand_range(nums["start"], nums["stop"], kinds[0], nums[kinds[0]])
    except ValueError as exc:
        raise SpecError(f"{path}: {where}: {exc}") from None


def _check_unique(key: str, values: list[Any], path: Path) -> None:
    seen: dict[str, Any] = {}
    for value in values:
        token = value_token(key, value)
        if token in seen:
            raise SpecError(f"{path}: axes.{key}: values {seen[token]!r} and {value!r} name "
                            "the same cell")
        seen[token] = value


def _capacity(table: dict[str, Any], path: Path) -> CapacitySettings:
    known = CapacitySettings.__dataclass_fields__
    for key, value in table.items():
        if key not in known:
            raise SpecError(f"{path}: capacity.{key}: unknown key{_hint(key, known)}")
        wanted = str if key == "metric" else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted):
            raise SpecError(f"{path}: capacity.{key}: bad value {value!r}")
    try:
        return CapacitySettings(**table)
    except ValueError as exc:
        raise SpecError(f"{path}: capacity: {exc}") from None
