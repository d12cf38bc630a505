"""Which result directories may be merged into one comparison, and what they share.

Several ``simulate.py`` runs make one sweep report only when they differ in sweep axes alone
(``SWEEP_AXES``: the request rate and the block size). Any other difference (trace, model,
GPU, the set of allocators, a scheduler option, the seed) would put incomparable points on one
curve, so ``check_mergeable`` refuses it with one line naming the field. ``run_context`` gives
the trace, model and GPU that sweep figures print in their titles.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from reports import schema as S
from reports.errors import ReportError
from reports.readers import read_json

SWEEP_AXES = ("rate_scale", "request_rate", "block_size")
# options that change where or how results are written, not what they are
OUTPUT_OPTIONS = ("out", "progress", "report", "validate", "debug", "fast",
                  "record_allocation_log", "sweep", "overwrite", "json", "list")
# options compared through the resolved value below instead of their spelling
RESOLVED = ("trace", "model", "gpu", "allocators")


def identity(result_dir: Path) -> dict[str, Any]:
    """The fields that must match between merged runs, in the order they are checked."""
    config = read_json(result_dir / S.CONFIG_FILE)
    summary = read_json(result_dir / S.SUMMARY_FILE)
    prov = config.get("provenance") if isinstance(config.get("provenance"), dict) else {}
    options = config.get("options") if isinstance(config.get("options"), dict) else {}
    fields: dict[str, Any] = {
        "trace": prov.get("trace_sha256") or options.get("trace") or "built-in default workload",
        "model": _name(config.get("model")), "GPU": _name(config.get("gpu")),
        "allocator set": ", ".join(sorted(summary.get(S.ALLOCATORS_KEY) or {})),
    }
    skip = set(SWEEP_AXES) | set(OUTPUT_OPTIONS) | set(RESOLVED)
    fields.update({f"option {k}": v for k, v in options.items() if k not in skip})
    return fields


def _name(block: Any) -> Any:
    return block.get("name") if isinstance(block, dict) else block


def _shown(value: Any) -> str:
    text = "none" if value is None else str(value)
    return text if len(text) <= 48 else text[:45] + "..."


def check_mergeable(result_dirs: list[Path]) -> None:
    """Refuse runs that differ in anything but a sweep axis.

    Raises:
        ReportError: one line naming the two runs, the field and both values.
    """
    if len(result_dirs) < 2:
        return
    first = identity(result_dirs[0])
    for other in result_dirs[1:]:
        theirs = identity(other)
        for field in dict.fromkeys([*first, *theirs]):
            if first.get(field) != theirs.get(field):
                raise ReportError(
                    f"cannot merge {result_dirs[0]} and {other}: they differ in {field} "
                    f"({_shown(first.get(field))} vs {_shown(theirs.get(field))}), which is "
                    f"not a sweep axis ({', '.join(SWEEP_AXES)}); report them one at a time")


def run_context(config: dict[str, Any]) -> dict[str, str]:
    """Trace, model and GPU of a run's config.json, for figure titles."""
    prov = config.get("provenance") if isinstance(config.get("provenance"), dict) else {}
    options = config.get("options") if isinstance(config.get("options"), dict) else {}
    trace = prov.get("trace_path") or options.get("trace")
    tp = options.get("tp")
    gpu = str(_name(config.get("gpu")) or "GPU")
    return {"trace": Path(str(trace)).name if trace else "built-in default workload",
            "model": str(_name(config.get("model")) or "model"),
            "gpu": f"{tp} x {gpu}" if isinstance(tp, int) and tp > 1 else gpu}


def context_line(context: dict[str, str]) -> str:
    """"trace X | model Y | GPU Z" for a title."""
    return (f"trace {context.get('trace', '?')} | model {context.get('model', '?')} | "
            f"GPU {context.get('gpu', '?')}")
