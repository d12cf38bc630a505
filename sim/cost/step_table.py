"""Table step time: interpolates per-layer kernel times measured on one GPU for one model.

CSV (written by kernels/, e.g. sim/calibration/h200_llama3_8b.csv), times in microseconds for
ONE layer on one GPU; '#' lines are comments, those of the form '# key: value' are header fields:
  # model: Llama-3-8B        (required; any preset alias or HF id)
  # gpu: NVIDIA H200         (required; preset name or torch device name)
  # tp: 1                    (optional, default 1; kv_cache_dtype: bf16 optional, checked if set)
  kind,batch,context,new_tokens,time_us
  decode_attn,B,C,1,t   B sequences, each with C cached tokens, decoding one token (full grid,
                        except that the largest batches may lack the longest contexts)
  prefill_attn,1,C,N,t  one sequence prefilling N new tokens after C cached ones (full grid)
  gemm,1,0,T,t          all linear layers of one layer for T tokens (batch, context ignored)
  lm_head,S,0,1,t       optional: LM head for S sequences (whole model, not per layer)
Step: attention = L x (decode_attn(S_dec, mean decode context) + sum prefill_attn(N_i, C_i)),
linear = L x gemm(T) + lm_head(S); bilinear interpolation, clamped below the grid, linearly
extrapolated above it, never negative. Overhead: the default constants (not measured).
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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

COLUMNS = ("kind", "batch", "context", "new_tokens", "time_us")
KINDS = ("decode_attn", "prefill_attn", "gemm", "lm_head")


def _locate(axis: tuple[float, ...], x: float) -> tuple[int, float]:
    """Segment index and fraction for x: 0 below the axis, > 1 past its end (extrapolation)."""
    if len(axis) == 1 or x <= axis[0]:
        return 0, 0.0
    i = min(bisect_right(axis, x) - 1, len(axis) - 2)
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


@dataclass(frozen=True, slots=True)
class Grid1D:
    xs: tuple[float, ...]
    values: tuple[float, ...]

    def __call__(self, x: float) -> float:
        i, t = _locate(self.xs, x)
        if t == 0.0:
            return self.values[i]
        return max(0.0, self.values[i] + t * (self.values[i + 1] - self.values[i]))


@dataclass(frozen=True, slots=True)
class Grid2D:
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    values: tuple[tuple[float, ...], ...]  # values[i][j] at (xs[i], ys[j])

    def __call__(self, x: float, y: float) -> float:
        i, t = _locate(self.xs, x)
        j, u = _locate(self.ys, y)
        row0 = self.values[i]
        row1 = self.values[i + 1] if t else row0
        a = row0[j] + u * (row0[j + 1] - row0[j]) if u else row0[j]
        b = row1[j] + u * (row1[j + 1] - row1[j]) if u else row1[j]
        return max(0.0, a + t * (b - a))


@dataclass(frozen=True, slots=True)
class CalibrationTable:
    header: dict[str, str]
    decode_attn: Grid2D
    prefill_attn: Grid2D
    gemm: Grid1D
    lm_head: Grid1D | None


def _parse_rows(file: Path) -> tuple[dict[str, str], dict[str, dict[tuple[int, int], float]]]:
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file}: cannot read: {exc}") from exc
    header: dict[str, str] = {}
    points: dict[str, dict[tuple[int, int], float]] = {kind: {} for kind in KINDS}
    seen_columns = False
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep and key.strip():
                header[key.strip().lower()] = value.strip()
            continue
        if not line:
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if not seen_columns:
            if tuple(cells) != COLUMNS:
                raise ValueError(f"{file}:{lineno}: expected columns {','.join(COLUMNS)}")
            seen_columns = True
            continue
        kind, point, time_us = _parse_row(file, lineno, cells)
        if point in points[kind]:
            raise ValueError(f"{file}:{lineno}: duplicate {kind} point {point}")
        points[kind][point] = time_us
    return header, points


def _parse_row(file: Path, lineno: int, cells: list[str]) -> tuple[str, tuple[int, int], float]:
    where = f"{file}:{lineno}"
    if len(cells) != len(COLUMNS):
        raise ValueError(f"{where}: expected {len(COLUMNS)} fields, got {len(cells)}")
    kind = cells[0]
    if kind not in KINDS:
        raise ValueError(f"{where}: field kind {kind!r} not in {', '.join(KINDS)}")
    try:
        batch, context, new = (int(cell) for cell in cells[1:4])
        time_us = float(cells[4])
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    if batch < 1 or context < 0 or new < 1 or not time_us >= 0.0:
        raise ValueError(f"{where}: need batch >= 1, context >= 0, new_tokens >= 1, time_us >= 0")
    if kind == "decode_attn" and new != 1:
        raise ValueError(f"{where}: decode_attn rows need new_tokens = 1")
    if kind == "prefill_attn" and batch != 1:
        raise ValueError(f"{where}: prefill_attn rows need batch = 1")
    keys = {"decode_attn": (batch, context), "prefill_attn": (new, context),
            "gemm": (new, 0), "lm_head": (batch, 0)}
    return kind, keys[kind], time_us


def _grid2d(file: Path, kind: str, points: dict[tuple[int, int], float]) -> Grid2D:
    xs = sorted({x for x, _ in points})
    ys = sorted({y for _, y in points})
    if not points:
        raise ValueError(f"{file}: no {kind} rows")
    values = tuple(tuple(_point(file, kind, points, xs, x, y) for y in ys) for x in xs)
    return Grid2D(tuple(map(float, xs)), tuple(map(float, ys)), values)


def _point(file: Path, kind: str, points: dict[tuple[int, int], float], xs: list[int],
           x: int, y: int) -> float:
    """A grid value; a point missing at the large-batch end is scaled from a smaller batch.

    Calibration runs skip batch x context products too large to allocate; there the kernel is
    memory-bound and time grows in proportion to the batch, so t(x, y) = t(x', y) * x / x'
    for the largest measured x' < x. A hole anywhere else is an error.
    """
    if (x, y) in points:
        return points[x, y]
    smaller = [x2 for x2 in xs if x2 < x and (x2, y) in points]
    if kind != "decode_attn" or not smaller or any((x2, y) in points for x2 in xs if x2 > x):
        raise ValueError(f"{file}: {kind} grid lacks the point ({x}, {y})")
    return points[smaller[-1], y] * x / smaller[-1]


def _grid1d(points: dict[tuple[int, int], float]) -> Grid1D:
    xs = sorted(x for x, _ in points)
    return Grid1D(tuple(map(float, xs)), tuple(points[x, 0] for x in xs))


def load_calibration(path: str | Path) -> CalibrationTable:
    """Read a calibration CSV. Raises ValueError naming the file and line of any problem."""
    file = Path(path)
    header, points = _parse_rows(file)
    if not points["gemm"]:
        raise ValueError(f"{file}: no gemm rows")
    lm_head = _grid1d(points["lm_head"]) if points["lm_head"] else None
    return CalibrationTable(header, _grid2d(file, "decode_attn", points["decode_attn"]),
                            _grid2d(file, "prefill_attn", points["prefill_attn"]),
                            _grid1d(points["gemm"]), lm_head)


class TableStepModel(StepModel):
    """Step time interpolated from a calibration table measured for this model and GPU."""

    def __init__(self, table: CalibrationTable, model: ModelConfig, *,
                 overhead_s: float = DEFAULT_STEP_OVERHEAD_S,
                 per_seq_overhead_s: float = DEFAULT_PER_SEQ_OVERHEAD_S) -> None:
        self.table = table
        self.scale = model.num_layers * 1e-6  # per-layer microseconds -> whole-model seconds
        self.decode_context_cap = (None if model.sliding_window is None
                                   else model.sliding_window - 1)
        self.overhead_s, self.per_seq_overhead_s = overhead_s, per_seq_overhead_s

    @classmethod
    def from_file(cls, path: str | Path, model: ModelConfig, gpu: GpuSpec, tp: int = 1,
                  kv_cache_dtype: str | None = None) -> TableStepModel:
        """Load `path`, refusing a table measured for another model, GPU, tp or KV dtype."""
        table = load_calibration(path)
        check_measured_for(str(path), dict(table.header), model, gpu, tp, required=True)
        measured = table.header.get("kv_cache_dtype")
        if measured and kv_cache_dtype and measured.lower() != kv_cache_dtype.lower():
            raise ValueError(f"{path} was measured with kv_cache_dtype {measured}; this run "
                             f"uses {kv_cache_dtype}")
        return cls(table, model)

    def predict_split(self, num_decode: int, sum_decode_context: int,
                      prefills: Sequence[tuple[int, int]]) -> StepTime:
        seqs = num_decode + len(prefills)
        if seqs == 0:
            return ZERO_STEP
        table, cap = self.table, self.decode_context_cap
        attn = table.decode_attn(num_decode, sum_decode_context / num_decode) if num_decode else 0.0
        tokens = num_decode
        for new, context in prefills:
            tokens += new
            attn += table.prefill_attn(new, context if cap is None or context < cap else cap)
        linear = table.gemm(tokens) * self.scale
        if table.lm_head is not None:
            linear += table.lm_head(seqs) * 1e-6
        return StepTime(attn * self.scale, linear,
                        self.overhead_s + self.per_seq_overhead_s * seqs)
