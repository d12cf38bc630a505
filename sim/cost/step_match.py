"""Refuse a measured step-time file (poly or table) for a model or GPU it was not measured on.

Names are compared through the preset aliases, so 'Llama-3-8B', 'meta-llama/Meta-Llama-3-8B'
and 'llama3-8b' match, as do 'H200-141GB' and torch's device name 'NVIDIA H200'. A GPU with
overridden numbers ('H200-141GB (custom)') matches no file.
"""
from __future__ import annotations

from typing import Any

from sim.cost.gpus import GpuSpec, resolve_gpu_name
from sim.cost.models import ModelConfig, resolve_model_name


def _same(a: str, b: str, resolve: Any) -> bool:
    ra, rb = resolve(a), resolve(b)
    if ra is not None or rb is not None:
        return bool(ra == rb)
    return a.strip().lower() == b.strip().lower()


def check_measured_for(source: str, header: dict[str, Any], model: ModelConfig, gpu: GpuSpec,
                       tp: int, *, required: bool = False) -> None:
    """Raise ValueError unless `header` (keys model, gpu, tp) names this model, GPU and tp.

    Args:
        source: the file, for the message.
        header: fields read from the file; with `required`, model and gpu must be present.
        required: whether absent model/gpu fields are an error (tables) or unchecked (poly).
    """
    for key in ("model", "gpu"):
        if required and not header.get(key):
            raise ValueError(f"{source}: missing header field {key!r} (a line '# {key}: NAME')")
    got_model, got_gpu = header.get("model"), header.get("gpu")
    try:
        got_tp = int(header.get("tp", 1))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: field tp must be an integer, got {header['tp']!r}") from exc
    model_ok = got_model is None or _same(str(got_model), model.name, resolve_model_name)
    gpu_ok = got_gpu is None or _same(str(got_gpu), gpu.name, resolve_gpu_name)
    if not (model_ok and gpu_ok and got_tp == tp):
        raise ValueError(f"{source} was measured for model {got_model or '?'} on "
                         f"{got_gpu or '?'} (tp={got_tp}); this run uses {model.name} on "
                         f"{gpu.name} (tp={tp})")
