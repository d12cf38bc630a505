"""The executed-steps file: JSON lines written atomically, self-describing; and its summary.

Per section, one header line (`"kind": "header"`: format, model, device, software, sampling,
memory, method and a description of every step field), then one line per executed step
(`"kind": "step"`). The file is written to a temporary name in the same directory and renamed
when complete. The calibration artefact (benchmarks/calibrate.py) reuses the environment,
method and field descriptions. Format details: kernels/execute/README.md.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import torch
import triton

FORMAT = "pagedsim-executed-steps"
FORMAT_VERSION = 1

METHOD = {
    "forward": "whole decoder forward at the model's shapes, dtype and KV cache dtype (kernels/"
               "execute/forward.py); random weights, one layer's reused by every layer",
    "graph_s": "GPU seconds per step: the forward captured as one CUDA graph at the padded size,"
               " median per replay",
    "eager_s": "the same forward launched op by op from Python, between two CUDA events",
    "parts": "attention_s, linear_s, other_s: a CUDA graph of that part's launches alone",
    "moves_s": "block copies and swaps of the step on every layer, host clock, synchronous",
    "moe_routing": "seeded uniform top-k per token and layer; router GEMM and softmax still run",
}

STEP_FIELDS = {
    "step": "step index in the log (calibration: point index)",
    "class": "shape class (kernels/execute/sample.py)",
    "batch.num_seqs / num_decode": "scheduled sequences / those with one new token",
    "batch.decode_context_sum / decode_context_max": "tokens cached before the step, decodes",
    "batch.prefill": "[new tokens, tokens cached before the step] per prefill chunk",
    "batch.num_tokens / padded_tokens": "tokens computed / rows through the linear layers",
    "batch.mode": "vLLM's graph mode for this batch: full, piecewise or none",
    "batch.copies / swap_out_blocks / swap_in_blocks": "block moves before the forward",
    "graph_s, eager_s, attention_s, linear_s, other_s, moves_s": "seconds, see method",
    "replays": "graph replays per timed trial",
    "logged_attention_s": "the log's step-time model attention prediction (all layers)",
    "moe.experts_active_mean / tokens_per_expert_max": "routing of the step, per layer",
}


def sources_digest() -> str:
    """sha256 over kernels/'s Python sources (which kernel code was measured)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def environment(device: torch.device) -> dict[str, Any]:
    """Device, software versions, kernel sources and date of a measurement."""
    dev: dict[str, Any] = {"type": device.type}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        dev.update(name=props.name, sms=props.multi_processor_count,
                   memory_bytes=props.total_memory)
    return {"device": dev,
            "software": {"torch": torch.__version__, "triton": triton.__version__,
                         "cuda": torch.version.cuda, "python": platform.python_version(),
                         "kernels_sha256": sources_digest()},
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


class AtomicWriter:
    """A text file written under a temporary name and renamed into place on success."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        self.fh = os.fdopen(fd, "w", encoding="utf-8")

    def line(self, obj: dict[str, Any]) -> None:
        self.fh.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def write(self, text: str) -> None:
        self.fh.write(text)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.fh.close()
        if kind is None:
            os.replace(self.tmp, self.path)
        else:
            os.unlink(self.tmp)


def _ms(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    return f"{statistics.median(got) * 1e3:.3f}" if got else "-"


def summary_table(rows: list[dict[str, Any]], key: str) -> list[str]:
    """Median times per value of `key` ('mode' or 'class') as aligned text lines."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row.get(key) or row["batch"].get(key)), []).append(row)
    cols = ("graph_s", "eager_s", "attention_s", "linear_s", "other_s", "moves_s")
    lines = [f"{key:<22} {'steps':>6} {'tokens':>7} " + " ".join(
        f"{c.removesuffix('_s') + ' ms':>11}" for c in cols)]
    for name, group in sorted(groups.items()):
        tokens = statistics.median(r["batch"]["num_tokens"] for r in group)
        lines.append(f"{name:<22} {len(group):>6} {tokens:>7.0f} "
                     + " ".join(f"{_ms([r[c] for r in group]):>11}" for c in cols))
    return lines


def logged_vs_measured(rows: list[dict[str, Any]]) -> str:
    """The log's attention prediction against measured attention: median |pred/meas - 1|."""
    pairs = [(r["logged_attention_s"], r["attention_s"]) for r in rows
             if r.get("logged_attention_s") is not None and r.get("attention_s")]
    if not pairs:
        return "logged attention_s vs measured: no pairs"
    errs = [p / m - 1 for p, m in pairs]
    return (f"logged attention_s vs measured attention part: median |pred/meas - 1| "
            f"{statistics.median(abs(e) for e in errs):.0%}, median bias "
            f"{statistics.median(errs):+.0%} ({len(pairs)} steps)")
