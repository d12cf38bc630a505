"""Calibration artefacts (`pagedsim-step-calibration` v1, benchmarks/calibrate.py): reading,
the model and GPU they were measured for, and the artefacts shipped in sim/cost/calibrations/.

An artefact holds executed step times of synthetic batches (one point per batch shape) with
the architecture, device and dtypes; kernels/execute/README.md describes the format. A shipped
artefact matches a run when the model's shape (every field that changes a step's work), the
GPU preset, the model dtype and the KV cache dtype are the same and tp is 1. An artefact's
cache dtype is its `model.kv_cache_dtype` (the model dtype where absent); a run's is its
`--kv-cache-dtype` with auto meaning the model dtype and fp8 meaning fp8_e4m3 (vLLM's names).
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.cost.gpus import GpuSpec, get_gpu, resolve_gpu_name
from sim.cost.model_config import ModelConfig

SHIPPED_DIR = Path(__file__).with_name("calibrations")
FORMAT, FORMAT_VERSION = "pagedsim-step-calibration", 1
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# An artefact's model.kv_cache_dtype (kernels/execute/arch.py's names) as sim's names.
_KV_DTYPES = {**_TORCH_DTYPES, "fp8_e4m3": "fp8_e4m3"}
# The fields of a model that change a step's work (names are not compared). An artefact
# matches a run on all but the sliding window (MATCH_FIELDS): the window changes which keys
# attention reads, and the fit's features count those keys (a window-256 Mistral-7B's
# executed steps: 1.9 % / 5.3 % median / p90 with the Mistral-7B artefacts,
# benchmarks/RESULTS.md).
SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                "intermediate_size", "vocab_size", "sliding_window", "gated_mlp", "qkv_bias",
                "qk_norm", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                "shared_expert_intermediate_size")
MATCH_FIELDS = tuple(f for f in SHAPE_FIELDS if f != "sliding_window")


@dataclass(frozen=True, slots=True)
class Calibration:
    """One artefact: where it came from, what it measured, and its points."""

    source: str
    model: ModelConfig
    gpu_name: str
    device: str
    date: str
    points: list[dict[str, Any]]
    kv_dtype: str  # sim's name: bf16, fp16, fp32 or fp8_e4m3

    @property
    def gpu(self) -> GpuSpec:
        return get_gpu(self.gpu_name)

    @property
    def kv_cache_dtype(self) -> str:
        """The `--kv-cache-dtype` value of a run like the measured one (auto: model dtype)."""
        return "auto" if self.kv_dtype == self.model.dtype else self.kv_dtype

    def matches(self, model: ModelConfig, gpu: GpuSpec, tp: int, kv_dtype: str) -> bool:
        """Whether this artefact measured `model`'s shape and dtype, with the KV cache dtype
        `kv_dtype` (a `--kv-cache-dtype` value), on `gpu` at tp 1."""
        same_shape = all(getattr(self.model, f) == getattr(model, f) for f in MATCH_FIELDS)
        return (same_shape and tp == 1 and self.model.dtype == model.dtype
                and self.kv_dtype == run_kv_dtype(model, kv_dtype)
                and gpu.name == self.gpu_name)

    def describe(self) -> str:
        kv = "" if self.kv_dtype == self.model.dtype else f", kv {self.kv_dtype}"
        return (f"{self.source} ({len(self.points)} points of {self.model.name}{kv} on "
                f"{self.device}, {self.date})")


def run_kv_dtype(model: ModelConfig, kv_cache_dtype: str) -> str:
    """A run's KV cache dtype as artefacts name it: auto is the model's, fp8 is fp8_e4m3."""
    name = kv_cache_dtype.lower()
    return {"auto": model.dtype, "fp8": "fp8_e4m3"}.get(name, name)


def model_of(raw: Any, source: str) -> ModelConfig:
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: field 'model' must be an object")  # noqa: TRY004
    try:
        fields = {f: raw[f] for f in (*SHAPE_FIELDS, "name")}
        dtype = _TORCH_DTYPES[raw["dtype"]]
    except KeyError as exc:
        raise ValueError(f"{source}: missing or unknown field model.{exc.args[0]}") from None
    try:
        return ModelConfig(dtype=dtype, num_params=1, max_context_len=1 << 30, **fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: field 'model': {exc}") from None


def kv_dtype_of(raw: dict[str, Any], source: str) -> str:
    """The artefact model's cache dtype in sim's names; absent: the model dtype."""
    kv = raw.get("kv_cache_dtype") or raw["dtype"]
    if kv not in _KV_DTYPES:
        raise ValueError(f"{source}: field 'model.kv_cache_dtype' = {kv!r} is none of "
                         f"{sorted(_KV_DTYPES)}")
    return _KV_DTYPES[kv]


def read_calibration(path: str | Path) -> Calibration:
    """Read and check an artefact.

    Raises:
        ValueError: unreadable, not this format, an unknown GPU, no points (one line).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: line {exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file (field 'format')")
    if data.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: field 'format_version' = {data.get('format_version')!r}: "
                         f"this reader knows version {FORMAT_VERSION}")
    device = data.get("device") or {}
    gpu = resolve_gpu_name(str(device.get("name", "")))
    if gpu is None:
        raise ValueError(f"{path}: field 'device.name' = {device.get('name')!r} is no GPU "
                         "preset (a calibration must be measured on a known GPU)")
    points = [p for p in data.get("points") or [] if p.get("graph_s")]
    if not points:
        raise ValueError(f"{path}: field 'points' holds no point with a graph_s time")
    if int(data.get("tp", 1)) != 1:
        raise ValueError(f"{path}: field 'tp' = {data.get('tp')!r}: only tp 1 is measured")
    model = model_of(data.get("model"), str(path))
    return Calibration(str(path), model, gpu, str(device.get("name")),
                       str(data.get("date", "?")), points, kv_dtype_of(data["model"], str(path)))


def shipped_stamp() -> tuple[Any, ...]:
    """The directory, then (name, mtime in ns, size) of every shipped artefact: what `shipped`
    is read again for."""
    return (str(SHIPPED_DIR), *((p.name, (st := p.stat()).st_mtime_ns, st.st_size)
                                for p in sorted(SHIPPED_DIR.glob("*.json"))))


@functools.lru_cache(maxsize=4)
def _read_shipped(stamp: tuple[Any, ...]) -> tuple[Calibration, ...]:
    return tuple(replace(read_calibration(Path(stamp[0]) / name),
                         source=f"sim/cost/calibrations/{name}") for name, _, _ in stamp[1:])


def shipped() -> list[Calibration]:
    """Every artefact in sim/cost/calibrations/, by file name (read once per process while the
    files stay as they are; the Calibration objects are shared: do not change their points)."""
    return list(_read_shipped(shipped_stamp()))


def find_shipped(model: ModelConfig, gpu: GpuSpec, tp: int, kv_dtype: str) -> Calibration | None:
    """The shipped artefacts measured for this model shape, GPU, dtypes and tp, joined into
    one (their points together; the first file's name, the others counted), or None."""
    found = [c for c in shipped() if c.matches(model, gpu, tp, kv_dtype)]
    if not found:
        return None
    first = found[0]
    source = first.source + (f" + {len(found) - 1} more" if len(found) > 1 else "")
    return Calibration(source, first.model, first.gpu_name, first.device, first.date,
                       [p for c in found for p in c.points], first.kv_dtype)
