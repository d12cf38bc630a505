"""The allocation log (``--record-allocation-log``): every block decision, step by step.

``allocation_log.jsonl.gz`` holds, per allocator, a header line (block size, pool sizes, the
model's whole architecture and dtype (`ARCH_FIELDS`), the seed and how token ids were made) and one line per step:
each scheduled sequence's new positions, token ids, context length, full block table and slot
mapping, plus the step's copy-on-write plan, swap maps, frees, prefix hits, forks,
preemptions and the step-time model's ``attention_s``. kernels/ replays it on real tensors to
check the allocator's tables; the format is in ``sim/results/results_schema.json``. Recording forces
the reference loop, so every request's state is current at every step.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol

from allocator.paged import PagedKVCacheManager
from sim.config import RunConfig
from sim.cost.models import ModelConfig
from sim.cost.step_base import StepTime
from sim.results.outputs import SCHEMA_VERSION, replace_into

LOG_FILE = "allocation_log.jsonl.gz"

TOKEN_IDS = ("from the trace where it has them (explicit ids; Mooncake hash ids expanded "
             "block by block), else traces.derive_token_ids(seed, key, start, count) with key "
             "= request id for prompts and sample 0, 'id/k' for sample k, 'id/bN' for a "
             "forked beam")


ARCH_FIELDS = ("hidden_size", "intermediate_size", "vocab_size", "rope_theta", "rms_norm_eps",
               "gated_mlp", "qkv_bias", "qk_norm", "num_experts", "num_experts_per_tok",
               "moe_intermediate_size", "shared_expert_intermediate_size", "expert_dtype")


def architecture(model: ModelConfig) -> dict[str, Any]:
    """The header's architecture fields beyond the head layout: what the executed forward
    (kernels/execute) needs to rebuild every layer without reading sim/."""
    return {name: getattr(model, name) for name in ARCH_FIELDS}


class Stepping(Protocol):
    """What the log reads from a scheduler: its manager and the steps applied so far."""

    @property
    def manager(self) -> Any: ...

    @property
    def step_index(self) -> int: ...


class Planned(Protocol):
    """What the log reads from a step's plan (``sim/sched/plan.py``)."""

    seqs: list[Any]
    tokens: list[int]
    contexts: list[int]
    events: dict[str, list[Any]] | None
    num_preemptions: int


class LogSection:
    """One allocator's section of the allocation log: a gzip member written to a temporary
    file in the output directory by the process that replays that allocator (``assemble``
    joins the sections, in allocator order, into the log)."""

    def __init__(self, config: RunConfig, seed: int, allocator: str) -> None:
        out = config.output.out_dir
        out.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(prefix=".allocation_log.", dir=out)
        self.raw = os.fdopen(fd, "wb")
        self.fh = gzip.GzipFile(filename="", mode="wb", fileobj=self.raw, mtime=0)
        cache, m = config.cache, config.model
        self.write({
            "kind": "header", "schema_version": SCHEMA_VERSION, "allocator": allocator,
            "block_size": cache.block_size, "num_gpu_blocks": cache.num_gpu_blocks,
            "num_cpu_blocks": cache.num_cpu_blocks,
            "model": {"name": m.name, "num_layers": m.num_layers, "num_heads": m.num_heads,
                      "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
                      "dtype": m.dtype, "kv_cache_dtype": cache.kv_cache_dtype,
                      "sliding_window": m.sliding_window, **architecture(m)},
            "seed": seed, "token_ids": TOKEN_IDS,
        })
        self.writer = StepWriter(self, cache.block_size)

    def write(self, record: dict[str, Any]) -> None:
        self.fh.write((json.dumps(record, separators=(",", ":")) + "\n").encode())

    def close(self) -> str:
        """Finish the section; returns its temporary file."""
        self.fh.close()
        self.raw.close()
        return self.tmp


def assemble(out_dir: Path, sections: list[str]) -> None:
    """Join finished sections (temporary files, in allocator order) into the log, atomically;
    the sections are removed."""
    fd, tmp = tempfile.mkstemp(prefix=".allocation_log.", dir=out_dir)
    with os.fdopen(fd, "wb") as out:
        for section in sections:
            with open(section, "rb") as fh:
                shutil.copyfileobj(fh, out)
    replace_into(tmp, out_dir / LOG_FILE)
    for section in sections:
        Path(section).unlink()


class StepWriter:
    """Records one allocator's steps: sequences at plan time, events after the step."""

    def __init__(self, log: LogSection, block_size: int) -> None:
        self.log = log
        self.block_size = block_size

    def plan(self, sched: Stepping, plan: Planned, st: StepTime, start: float) -> None:
        """Capture each scheduled sequence's tables before the step changes anything."""
        paged = isinstance(sched.manager, PagedKVCacheManager)
        seqs = []
        for seq, n, c in zip(plan.seqs, plan.tokens, plan.contexts):
            table = list(sched.manager.get_block_ids(seq.request_id)[0])
            positions = range(c, c + n)
            if paged:
                bs = self.block_size
                slots = [table[p // bs] * bs + p % bs for p in positions]
            else:
                slots = [table[0] + p for p in positions] if table else []
            seqs.append({"request_id": seq.request_id, "sample": seq.sample,
                         "positions": [c, c + n],
                         "token_ids": list(seq.req.all_token_ids[c:c + n]),
                         "context_len": c + n, "block_table": table, "slot_mapping": slots})
        assert plan.events is not None
        plan.events["seqs"] = seqs

    def step(self, sched: Stepping, plan: Planned, st: StepTime, start: float) -> None:
        """Write the step's line once it has been applied."""
        events = plan.events or {}
        self.log.write({
            "kind": "step", "step": sched.step_index - 1, "time_s": start,
            "attention_s": st.attention_s, "seqs": events.get("seqs", []),
            "copies": events.get("copies", []), "swap_out": events.get("swap_out", []),
            "swap_in": events.get("swap_in", []), "frees": events.get("frees", []),
            "prefix_hits": events.get("prefix_hits", []), "forks": events.get("forks", []),
            "preemptions": plan.num_preemptions,
        })


def read_log(path: Path) -> list[dict[str, Any]]:
    """All lines of an allocation log (tests and small logs)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]
