"""kernels.execute on CUDA: graphs, parts and the logits of a graph replay at real head sizes,
with bf16 and fp8 (e4m3) KV caches."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from kernels.execute.arch import Architecture
from kernels.execute.batch import capture_sizes, make_batch
from kernels.execute.forward import Forward
from kernels.execute.inputs import make_buffers, prepare
from kernels.execute.model import Engine
from kernels.execute.run import RunOptions, execute_log
from kernels.validate.log import LogHeader, StepRecord, iter_log, iter_objects
from tests.unit.test_execute import _check_trace, _raw
from tests.unit.test_execute_forward import reference_logits
from tests.unit.validate_logkit import scenario_log

pytestmark = pytest.mark.gpu

LAYOUT = {"heads": (32, 8, 128), "block_size": 16, "num_blocks": 64}
LLAMA = {"hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 32000}
MOE = {"hidden_size": 1024, "intermediate_size": 2048, "vocab_size": 4096, "num_experts": 8,
       "num_experts_per_tok": 2, "moe_intermediate_size": 512,
       "shared_expert_intermediate_size": 256, "qk_norm": True}
FP8 = {"kv_cache_dtype": "fp8", "k_scale": 0.5, "v_scale": 2.0}
OSS = {"hidden_size": 1024, "intermediate_size": 2048, "attention_sinks": True,
       "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"],
       "qkv_bias": True}


def _execute_scenario(tmp_path: Path, arch: dict[str, Any]
                      ) -> tuple[Any, dict[int, list[dict[str, Any]]]]:
    """The scenario log of `arch` executed under graphs: all 11 steps run on the logged
    tables, graph, eager and every part timed, a graph never slower than eager launches."""
    log = scenario_log(tmp_path / "log.jsonl.gz", dtype="bf16", arch=arch, **LAYOUT)
    raw = {o["step"]: o for o in _raw(log) if o["kind"] == "step"}
    traces: dict[int, list[dict[str, Any]]] = {}
    [sec] = execute_log(log, tmp_path / "out.jsonl", RunOptions(device="cuda", traces=traces))
    assert [r["step"] for r in sec.rows] == list(range(11))
    for row in sec.rows:
        _check_trace(raw[row["step"]], row, traces[row["step"]], 2, 2)
        assert 0 < row["graph_s"] <= row["eager_s"] * 1.05, row
        assert all(row[f"{p}_s"] > 0 for p in ("attention", "linear", "other"))
    return sec, traces


def test_scenario_executes_under_graphs(tmp_path: Path) -> None:
    """All 11 steps run on the logged tables, each replayed, in full and piecewise graphs."""
    sec, _ = _execute_scenario(tmp_path, LLAMA)
    assert all(row["replays"] >= 1 for row in sec.rows)
    assert {r["batch"]["mode"] for r in sec.rows} == {"full", "piecewise"}


def test_fp8_scenario_executes_under_graphs(tmp_path: Path) -> None:
    """An fp8-cache log (bf16 model, scales 0.5 / 2): all 11 steps run on the logged tables
    under graphs, every attention launch on a float8_e4m3fn cache of one byte a value."""
    sec, traces = _execute_scenario(tmp_path, {**LLAMA, **FP8})
    for row in sec.rows:
        assert {t["cache_dtype"] for t in traces[row["step"]] if t["op"] == "attention"} == \
            {"torch.float8_e4m3fn"}
    header = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])
    heads, head_dim = LAYOUT["heads"][1:]
    assert header["memory"]["kv_dtype"] == "float8_e4m3fn"
    assert header["memory"]["kv_bytes"] == 2 * 2 * 64 * 16 * heads * head_dim


def _setup(tmp_path: Path, dtype: str, arch: dict[str, Any], heads: tuple[int, int, int]
           ) -> tuple[Engine, list[StepRecord]]:
    log = scenario_log(tmp_path / "log.jsonl.gz", dtype=dtype, arch=arch, heads=heads,
                       block_size=16, num_blocks=64)
    items = list(iter_log(log))
    hdr = items[0]
    assert isinstance(hdr, LogHeader)
    a = Architecture.from_header(next(iter_objects(log))[1]["model"], "log")
    engine = Engine(a, hdr.block_size, hdr.num_gpu_blocks, hdr.num_cpu_blocks,
                    torch.device("cuda"), seed=5, k_scale=hdr.k_scale, v_scale=hdr.v_scale)
    return engine, [i for i in items if isinstance(i, StepRecord)]


@pytest.mark.parametrize(("dtype", "arch", "heads", "tol"), [
    ("fp32", {"hidden_size": 1024, "intermediate_size": 2048}, (32, 8, 128), 1e-3),
    ("bf16", MOE, (8, 2, 128), 5e-2),
    ("bf16", {"hidden_size": 1024, "intermediate_size": 2048, **FP8}, (32, 8, 128), 5e-2),
    ("bf16", OSS, (64, 8, 64), 5e-2),
], ids=["dense-fp32", "moe-bf16", "dense-bf16-fp8-cache", "gpt-oss-attention-bf16"])
def test_graph_replay_logits_match_reference(tmp_path: Path, dtype: str, arch: dict[str, Any],
                                             heads: tuple[int, int, int], tol: float) -> None:
    """A step captured as a CUDA graph and replayed gives the float64 reference's logits
    (decode-only padded, and mixed steps)."""
    engine, recs = _setup(tmp_path, dtype, arch, heads)
    for rec in (recs[2], recs[4], recs[8]):
        batch = make_batch(rec, capture_sizes())
        t = prepare(engine, batch, seed=2)
        b = make_buffers(engine, batch)
        fwd = Forward(engine, t, b)
        fwd()
        kv = engine.kv.clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fwd()
        b.logits.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = reference_logits(engine, batch, kv, t.routing)
        err = (b.logits.double() - ref).abs().max() / ref.abs().max()
        assert err < tol, (rec.step, float(err))
