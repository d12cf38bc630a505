"""Read the simulator's allocation log (`allocation_log.jsonl.gz`) without importing `sim/`.

The format is documented in `sim/results/results_schema.json` ("allocation_log.jsonl.gz"): per
allocator a header line, then one line per step. This module streams the lines, checks the
fields the validator uses (a bad one is a `LogError` naming file, line and field) and turns
them into small records. It also decides which steps `--steps N` validates.

fp8 caches: `model.kv_cache_dtype` "fp8" / "fp8_e4m3" (e5m2 is refused), `model.dtype` the
query dtype, optional `model.k_scale` / `model.v_scale` (> 0, default 1.0); kernels/README.md.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPES = {"fp16": "float16", "float16": "float16", "half": "float16", "bf16": "bfloat16",
          "bfloat16": "bfloat16", "fp32": "float32", "float32": "float32", "float": "float32"}
FP8_NAMES = ("fp8", "fp8_e4m3")


class LogError(ValueError):
    """A missing, mistyped or inconsistent field in the allocation log (exit code 2)."""


@dataclass(frozen=True, slots=True)
class LogHeader:
    """One allocator section's header: pool sizes, head layout and dtype."""

    allocator: str
    block_size: int
    num_gpu_blocks: int
    num_cpu_blocks: int
    model_name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    sliding_window: int | None
    seed: int
    line: int
    kv_cache_dtype: str | None = None
    k_scale: float = 1.0
    v_scale: float = 1.0

    @property
    def paged(self) -> bool:
        """Whether block tables hold block ids (contiguous managers log `[start, end]`)."""
        return self.allocator.startswith("paged")


@dataclass(slots=True)
class SeqRecord:
    """One scheduled sequence of a step: new positions [start, end) and their slots."""

    request_id: str
    sample: int
    start: int
    end: int
    token_ids: list[int]
    block_table: list[int]
    slot_mapping: list[int]

    @property
    def num_new(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class StepRecord:
    """One step's line, with the fields the validator replays."""

    step: int
    line: int
    attention_s: float
    seqs: list[SeqRecord]
    copies: list[tuple[int, int]]
    swap_out: list[tuple[str, list[tuple[int, int]]]]
    swap_in: list[tuple[str, list[tuple[int, int]]]]
    frees: list[tuple[str, str]]
    hit_tokens: dict[str, list[int]]
    forks: list[tuple[str, str]]
    preemptions: int
    num_prefix_hits: int

    @property
    def special(self) -> bool:
        """A step `--steps N` always validates: COW copy, swap, preemption or prefix hit."""
        return bool(
            self.copies or self.swap_out or self.swap_in or self.preemptions or self.num_prefix_hits
        )


class _Fields:
    """Typed field access that names the file, line and field on error."""

    def __init__(self, path: Path, line: int) -> None:
        self.where = f"{path}:{line}"

    def get(self, obj: Any, name: str, kind: type | tuple[type, ...], ctx: str = "") -> Any:
        if not isinstance(obj, dict) or name not in obj:
            raise LogError(f"{self.where}: missing field '{ctx}{name}'")
        value = obj[name]
        wanted = (kind, int) if kind is float else kind
        if isinstance(value, bool) or not isinstance(value, wanted):
            raise LogError(f"{self.where}: field '{ctx}{name}' has type {type(value).__name__}")
        return value

    def ints(self, obj: Any, name: str, ctx: str = "") -> list[int]:
        value = self.get(obj, name, list, ctx)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise LogError(f"{self.where}: field '{ctx}{name}' must hold integers")
        return value

    def pairs(self, obj: Any, name: str, ctx: str = "") -> list[tuple[int, int]]:
        value = self.get(obj, name, list, ctx)
        out = []
        for pair in value:
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
            ):
                raise LogError(f"{self.where}: field '{ctx}{name}' must hold [int, int] pairs")
            out.append((pair[0], pair[1]))
        return out


def _scales(model: dict[str, Any], path: Path, line: int) -> list[float]:
    """`model.k_scale`, `model.v_scale`: positive numbers, 1.0 where absent."""
    scales = [model.get(name, 1.0) for name in ("k_scale", "v_scale")]
    for name, v in zip(("k_scale", "v_scale"), scales):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            raise LogError(f"{path}:{line}: field 'model.{name}' must be a positive number")
    return [float(v) for v in scales]


def parse_header(obj: dict[str, Any], path: Path, line: int) -> LogHeader:
    """The header line of one allocator section."""
    f = _Fields(path, line)
    model = f.get(obj, "model", dict)
    dtype = model.get("kv_cache_dtype") or "auto"
    fp8 = str(dtype).lower() in FP8_NAMES
    if dtype == "auto" or fp8:
        dtype = f.get(model, "dtype", str, "model.")
    if str(dtype).lower() not in DTYPES:
        raise LogError(
            f"{path}:{line}: field 'model.kv_cache_dtype' = {dtype!r}: the kernels "
            f"support fp16, bf16, fp32 and fp8 (e4m3) (pass --dtype to validate anyway)"
        )
    scales = _scales(model, path, line)
    window = model.get("sliding_window")
    if window is not None and (not isinstance(window, int) or window < 1):
        raise LogError(f"{path}:{line}: field 'model.sliding_window' must be null or >= 1")
    header = LogHeader(
        allocator=f.get(obj, "allocator", str),
        block_size=f.get(obj, "block_size", int),
        num_gpu_blocks=f.get(obj, "num_gpu_blocks", int),
        num_cpu_blocks=f.get(obj, "num_cpu_blocks", int),
        model_name=str(model.get("name", "?")),
        num_layers=f.get(model, "num_layers", int, "model."),
        num_heads=f.get(model, "num_heads", int, "model."),
        num_kv_heads=f.get(model, "num_kv_heads", int, "model."),
        head_dim=f.get(model, "head_dim", int, "model."),
        dtype=DTYPES[str(dtype).lower()],
        sliding_window=window,
        seed=f.get(obj, "seed", int),
        line=line,
        kv_cache_dtype="fp8_e4m3" if fp8 else None,
        k_scale=scales[0],
        v_scale=scales[1],
    )
    if header.block_size < 1 or header.num_gpu_blocks < 1 or header.num_heads % header.num_kv_heads:
        raise LogError(f"{path}:{line}: inconsistent header (block_size, num_gpu_blocks or heads)")
    return header


def _seq(f: _Fields, obj: Any, i: int) -> SeqRecord:
    ctx = f"seqs[{i}]."
    positions = f.ints(obj, "positions", ctx)
    if len(positions) != 2 or not 0 <= positions[0] <= positions[1]:
        raise LogError(f"{f.where}: field '{ctx}positions' must be [first, last + 1]")
    rec = SeqRecord(
        str(f.get(obj, "request_id", (str, int), ctx)),
        f.get(obj, "sample", int, ctx),
        positions[0],
        positions[1],
        f.ints(obj, "token_ids", ctx),
        f.ints(obj, "block_table", ctx),
        f.ints(obj, "slot_mapping", ctx),
    )
    if f.get(obj, "context_len", int, ctx) != rec.end:
        raise LogError(f"{f.where}: field '{ctx}context_len' differs from positions[1]")
    if len(rec.token_ids) != rec.num_new or len(rec.slot_mapping) != rec.num_new:
        raise LogError(
            f"{f.where}: field '{ctx}token_ids'/'slot_mapping' length differs "
            f"from the {rec.num_new} new positions"
        )
    return rec


def _swaps(f: _Fields, obj: dict[str, Any], name: str) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(str(f.get(e, "request_id", (str, int), f"{name}[{i}].")),
             f.pairs(e, "map", f"{name}[{i}].")) for i, e in enumerate(f.get(obj, name, list))]


def parse_step(obj: dict[str, Any], path: Path, line: int) -> StepRecord:
    """One step line."""
    f = _Fields(path, line)
    hits = f.get(obj, "prefix_hits", list)
    hit_tokens = {}
    for i, hit in enumerate(hits):
        if isinstance(hit, dict) and "token_ids" in hit:
            hit_tokens[str(f.get(hit, "request_id", (str, int), f"prefix_hits[{i}]."))] = f.ints(
                hit, "token_ids", f"prefix_hits[{i}]."
            )
    frees = [(str(f.get(e, "request_id", (str, int), f"frees[{i}].")),
              str(f.get(e, "reason", str, f"frees[{i}].")))
             for i, e in enumerate(f.get(obj, "frees", list))]
    forks = [(str(f.get(e, "parent", (str, int), f"forks[{i}].")),
              str(f.get(e, "child", (str, int), f"forks[{i}].")))
             for i, e in enumerate(f.get(obj, "forks", list))]
    return StepRecord(
        step=f.get(obj, "step", int),
        line=line,
        attention_s=float(f.get(obj, "attention_s", float)),
        seqs=[_seq(f, s, i) for i, s in enumerate(f.get(obj, "seqs", list))],
        copies=f.pairs(obj, "copies"),
        swap_out=_swaps(f, obj, "swap_out"),
        swap_in=_swaps(f, obj, "swap_in"),
        frees=frees,
        hit_tokens=hit_tokens,
        forks=forks,
        preemptions=f.get(obj, "preemptions", int),
        num_prefix_hits=len(hits),
    )


def iter_log(path: Path) -> Iterator[LogHeader | StepRecord]:
    """Headers and steps of the log in file order.

    Raises:
        LogError: unreadable file, bad JSON, a bad field, or a step before any header.
    """
    seen_header = False
    for line, obj in iter_objects(path):
        if obj["kind"] == "header":
            seen_header = True
            yield parse_header(obj, path, line)
        elif not seen_header:
            raise LogError(f"{path}:{line}: step line before any header")
        else:
            yield parse_step(obj, path, line)


def selected(rec: StepRecord, index: int, steps: int | None) -> bool:
    """Whether `--steps` validates this step (index counts the section's steps from 0)."""
    return steps is None or index < steps or rec.special


def iter_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, decoded object) of every line, fields unchecked: a fast scan of big logs.

    Raises:
        LogError: unreadable file, bad JSON, or a line whose `kind` is not header or step.
    """
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line, text in enumerate(fh, start=1):
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise LogError(f"{path}:{line}: invalid JSON ({exc.msg})") from None
                if not isinstance(obj, dict) or obj.get("kind") not in ("header", "step"):
                    raise LogError(f"{path}:{line}: field 'kind' must be 'header' or 'step'")
                yield line, obj
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise LogError(f"{path}: cannot read the allocation log ({exc})") from None
