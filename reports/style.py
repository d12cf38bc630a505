"""Shared look of every figure: fixed colours, figure creation and atomic saving.

Each allocator keeps one colour in every figure (a fixed palette by name; unknown plug-in
names get a stable colour from the rest of the palette), and each memory category keeps its
colour too. Figures are plain ``matplotlib.figure.Figure`` objects on the Agg canvas, never
pyplot, so building reports leaves no global state behind and needs no display.
"""
from __future__ import annotations

import os
import tempfile
import zlib
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, PercentFormatter

ALLOCATOR_COLORS = {
    "paged": "#1f77b4",          # blue
    "paged-nocache": "#17becf",  # cyan
    "max": "#d62728",            # red
    "pow2": "#ff7f0e",           # orange
    "oracle": "#2ca02c",         # green
    "ft": "#9467bd",             # purple
}
_SPARE_COLORS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#393b79", "#637939", "#843c39")
CATEGORY_COLORS = {
    "token_states": "#4c9a2a",      # green: useful
    "reserved": "#f2b134",          # amber: held for later
    "internal_frag": "#d1495b",     # red: wasted inside a reservation
    "external_frag": "#7b3294",     # purple: wasted between reservations
    "cached_evictable": "#8fc1e3",  # light blue: free but still useful
    "free": "#e6e6e6",              # light grey
}
FORMATS = ("png", "svg")
DPI = 110
PANEL_HEIGHT = 2.1
WIDTH = 10.0


def allocator_color(name: str) -> str:
    """The colour of an allocator, identical in every figure of every report."""
    if name in ALLOCATOR_COLORS:
        return ALLOCATOR_COLORS[name]
    return _SPARE_COLORS[zlib.crc32(name.encode()) % len(_SPARE_COLORS)]


def line_style(name: str, index: int) -> dict[str, Any]:
    """Colour, width and dashes of an allocator's line; the ``index``-th drawn is thinner and
    on top, so allocators with identical results (paged with and without caching, say) stay
    visible as a wide line with a thin one inside it."""
    return {"color": allocator_color(name), "linewidth": max(1.0, 2.8 - 0.35 * index),
            "linestyle": (0, (4, 1.5)) if name.endswith("-nocache") else "-",
            "zorder": 2 + index}


def new_figure(nrows: int = 1, ncols: int = 1, *, height: float | None = None,
               width: float = WIDTH, sharex: bool = False,
               sharey: bool = False) -> tuple[Figure, list[Axes]]:
    """A figure with constrained layout (labels never overlap) and its axes as a flat list."""
    fig = Figure(figsize=(width, height or max(3.2, PANEL_HEIGHT * nrows + 0.8)),
                 layout="constrained", dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, sharex=sharex, sharey=sharey, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def percent_axis(axis: Axis) -> None:
    """Show an axis whose data are percentages (0-100) with a % sign."""
    axis.set_major_formatter(PercentFormatter(100.0, decimals=0))


def plain_number(value: float) -> str:
    """A tick label without powers of ten: 0.05, 1, 20, 500, 2,000."""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


def plain_log_ticks(axis: Axis, span: float) -> None:
    """Log-axis ticks written as plain numbers, as many per decade as fit in a panel: 1-2-5
    over two decades at most, 1-3 up to 2.5 decades, else one per decade."""
    subs = (1.0, 2.0, 5.0) if span <= 1e2 else (1.0, 3.0) if span <= 10**2.5 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
    axis.set_minor_formatter(NullFormatter())


def save_figure(fig: Figure, path: Path, fmt: str) -> Path:
    """Write ``fig`` to ``path`` atomically (temp file in the same directory, then rename)."""
    if fmt not in FORMATS:
        raise ValueError(f"image format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".{fmt}")
    try:
        with os.fdopen(fd, "wb") as handle:
            fig.savefig(handle, format=fmt, dpi=DPI, metadata=_metadata(fmt))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _metadata(fmt: str) -> dict[str, str | None]:
    # no timestamps or software versions, so the same results give the same files
    if fmt == "svg":
        return {"Date": None, "Creator": None}
    return {"Software": None}


def write_text(path: Path, text: str) -> Path:
    """Write a text file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
