"""benchmarks/calibrate.py: synthetic points through the executor, one self-describing artefact."""
from __future__ import annotations

import json
import random
from pathlib import Path
from types import ModuleType

import pytest

from kernels.validate.log import StepRecord
from sim.cost.calibration import kv_dtype_of
from tests.benchkit import load_benchmark

TINY = {"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 2, "hidden_size": 32,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
        "intermediate_size": 64, "moe_intermediate_size": 16, "num_experts": 4,
        "num_experts_per_tok": 2, "vocab_size": 128, "torch_dtype": "bfloat16"}


@pytest.fixture(scope="module")
def cal() -> ModuleType:
    return load_benchmark("calibrate")


def test_synthetic_record_is_a_valid_step(cal: ModuleType) -> None:
    """Distinct non-null blocks, slots through the tables, decodes then one chunk."""
    rec = cal.synthetic_record(3, (2, 9, 5, 7), 40, 4, 100, random.Random(0))
    assert [(s.start, s.end) for s in rec.seqs] == [(9, 10), (9, 10), (7, 12)]
    blocks = [b for s in rec.seqs for b in s.block_table]
    assert len(set(blocks)) == len(blocks) and 0 not in blocks and max(blocks) < 40
    for s in rec.seqs:
        assert len(s.block_table) == -(-s.end // 4)
        assert s.slot_mapping == [s.block_table[p // 4] * 4 + p % 4 for p in range(s.start,
                                                                                     s.end)]
    assert cal.pool_blocks([(2, 9, 5, 7)], 4) == 1 + 2 * 3 + 3


def test_a_point_with_several_chunks(cal: ModuleType) -> None:
    """The fifth field: that many sequences each run the chunk over its own prefix blocks."""
    rec = cal.synthetic_record(0, (1, 9, 5, 7, 3), 40, 4, 100, random.Random(0))
    assert [(s.start, s.end) for s in rec.seqs] == [(9, 10)] + [(7, 12)] * 3
    blocks = [b for s in rec.seqs for b in s.block_table]
    assert len(set(blocks)) == len(blocks) == 3 + 3 * 3
    assert cal.pool_blocks([(1, 9, 5, 7, 3), (2, 9, 5, 7)], 4) == 1 + 3 + 3 * 3
    assert [cal.chunks_of(p) for p in [(1, 9, 5, 7, 3), (2, 9, 5, 7), (2, 9, 0, 0)]] == \
        [3, 1, 0]


def test_preset_architecture(cal: ModuleType) -> None:
    a = cal.preset_architecture("Llama-3-8B")
    assert (a.num_layers, a.hidden_size, a.num_kv_heads, a.intermediate_size, a.dtype) == \
        (32, 4096, 8, 14336, "bfloat16")
    assert cal.preset_architecture("Qwen2.5-7B").qkv_bias
    assert cal.preset_architecture("OPT-13B").rope_theta is None


def test_artefact_format(cal: ModuleType, tmp_path: Path) -> None:
    """Model, device, dtypes, software, date, method, field docs and every grid point."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    out = tmp_path / "cal.json"
    assert cal.main(["--model-json", str(cfg), "--grid", "tiny", "--device", "cpu",
                     "--out", str(out), "--no-parts"]) == 0
    art = json.loads(out.read_text())
    assert art["format"] == "pagedsim-step-calibration" and art["format_version"] == 1
    assert art["complete"] is True and art["error"] is None
    assert art["model"]["num_experts"] == 4 and art["dtype"] == art["kv_cache_dtype"] == \
        "bfloat16"
    assert {"torch", "triton"} <= set(art["software"]) and art["date"].endswith("Z")
    assert art["device"]["type"] == "cpu" and "graph_s" in art["method"]
    assert "prefill_new / prefill_prefix" in art["point_fields"]
    grid = cal.GRIDS["tiny"]
    assert len(art["points"]) == len(grid)
    assert any(len(point) == 5 for point in grid)
    for point, row in zip(grid, art["points"]):
        b, _, n, p = point[:4]
        k = cal.chunks_of(point)
        assert (row["num_decode"], row["decode_context"], row["prefill_new"],
                row["prefill_prefix"], row["num_prefill"]) == (*point[:4], k)
        assert row["batch"]["num_tokens"] == b + k * n
        assert row["batch"]["prefill"] == [[n, p]] * k
        assert row["kind"] == ("mixed" if b and n else "decode" if b else "prefill")
        assert row["eager_s"] > 0 and row["moe"]["experts_active_mean"] >= 1
    assert {p.name for p in tmp_path.iterdir()} == {"config.json", "cal.json"}


def test_bad_model_json(cal: ModuleType, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**TINY, "architectures": ["GPT2LMHeadModel"]}))
    assert cal.main(["--model-json", str(cfg), "--device", "cpu", "--out",
                     str(tmp_path / "o.json")]) == 2
    assert "architectures" in capsys.readouterr().err


def test_a_failing_point_keeps_the_measured_ones(cal: ModuleType, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA error at point 2 is noted and passed over: the artefact is marked incomplete,
    names the point and keeps every other; three failures in a row end the grid."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**TINY, "architectures": ["LlamaForCausalLM"]}))
    real = cal.execute_record

    def flaky(engine: object, rec: StepRecord, opts: object) -> dict[str, object]:
        if rec.step == 2:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return real(engine, rec, opts)

    monkeypatch.setattr(cal, "execute_record", flaky)
    out = tmp_path / "cal.json"
    assert cal.main(["--model-json", str(cfg), "--grid", "tiny", "--device", "cpu", "--out",
                     str(out), "--no-parts"]) == 1
    art = json.loads(out.read_text())
    grid = cal.GRIDS["tiny"]
    assert art["complete"] is False and art["error"] is None
    message = "CUDA error: operation not permitted when stream is capturing"
    assert art["skipped"] == [f"point {grid[2]}: {message}"]
    assert [p["step"] for p in art["points"]] == [i for i in range(len(grid)) if i != 2]

    def broken(engine: object, rec: StepRecord, opts: object) -> dict[str, object]:
        if rec.step >= 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(engine, rec, opts)

    monkeypatch.setattr(cal, "execute_record", broken)
    assert cal.main(["--model-json", str(cfg), "--grid", "tiny", "--device", "cpu", "--out",
                     str(out), "--no-parts"]) == 1
    art = json.loads(out.read_text())
    assert "illegal memory access" in art["error"] and len(art["skipped"]) == 3
    assert [p["step"] for p in art["points"]] == [0]


def test_fp8_cache_artefact(cal: ModuleType, tmp_path: Path) -> None:
    """--kv-cache-dtype fp8: every point runs on float8_e4m3fn caches (one byte a value) and
    the artefact's model records the cache dtype, as sim/cost/calibration.py reads it."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**TINY, "architectures": ["LlamaForCausalLM"]}))
    out = tmp_path / "cal.json"
    assert cal.main(["--model-json", str(cfg), "--grid", "tiny", "--device", "cpu",
                     "--out", str(out), "--no-parts", "--kv-cache-dtype", "fp8"]) == 0
    art = json.loads(out.read_text())
    assert (art["model"]["dtype"], art["model"]["kv_cache_dtype"]) == ("bfloat16", "fp8_e4m3")
    assert art["kv_cache_dtype"] == "fp8_e4m3" and art["memory"]["kv_dtype"] == "float8_e4m3fn"
    blocks = cal.pool_blocks(cal.GRIDS["tiny"], 16)
    assert art["memory"]["kv_bytes"] == 2 * 2 * blocks * 16 * 1 * 16
    assert len(art["points"]) == len(cal.GRIDS["tiny"])
    assert kv_dtype_of(art["model"], "cal.json") == "fp8_e4m3"


def test_e5m2_refused(cal: ModuleType, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cal.main(["--device", "cpu", "--out", str(tmp_path / "o.json"),
                     "--kv-cache-dtype", "fp8_e5m2"]) == 2
    [err] = capsys.readouterr().err.strip().splitlines()
    assert "--kv-cache-dtype" in err and "not e5m2" in err
    assert not (tmp_path / "o.json").exists()


def test_gpt_oss_attention_grid(cal: ModuleType, tmp_path: Path) -> None:
    """A dequantised gpt-oss config (tiny): every point runs with sinks and alternating
    windowed / full layers, recorded in the artefact's model."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**TINY, "architectures": ["GptOssForCausalLM"],
                               "num_local_experts": 4, "intermediate_size": 16,
                               "sliding_window": 4}))
    out = tmp_path / "cal.json"
    assert cal.main(["--model-json", str(cfg), "--grid", "tiny", "--device", "cpu",
                     "--out", str(out), "--no-parts"]) == 0
    art = json.loads(out.read_text())
    model = art["model"]
    assert model["attention_sinks"] is True and model["sliding_window"] == 4
    assert model["layer_types"] == ["sliding_attention", "full_attention"]
    assert len(art["points"]) == len(cal.GRIDS["tiny"]) and art["complete"] is True
