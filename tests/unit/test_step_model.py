"""Tests for the step-time models: roofline by hand, poly from JSON, table interpolation, specs."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.cost.gpus import get_gpu, make_gpu
from sim.cost.models import ModelConfig, get_model
from sim.cost.step_extras import Extras
from sim.cost.step_model import (
    PolyStepModel,
    RooflineStepModel,
    StepTime,
    TableStepModel,
    causal_pairs,
    make_step_model,
)

TINY = ModelConfig(name="tiny", num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=1,
                   head_dim=4, intermediate_size=16, vocab_size=32, dtype="fp16",
                   num_params=1000, max_context_len=64)
MEMORY_BOUND = make_gpu("custom", memory_gib=1, hbm_gbps=1, tflops=1, pcie_gbps=1)
COMPUTE_BOUND = make_gpu("custom", memory_gib=1, hbm_gbps=1e6, tflops=1e-6, pcie_gbps=1)
BATCH = [(3, 5), (1, 10)]  # a 3-token chunk after 5 cached tokens, and a decode at context 10


def test_step_time_total() -> None:
    """total_s is the sum of the three parts."""
    assert StepTime(0.5, 0.25, 0.125).total_s == 0.875


def test_causal_pairs_match_brute_force() -> None:
    """The closed form counts the keys each query sees, with and without a sliding window."""
    for window in (None, 1, 3, 7):
        for new in range(1, 9):
            for context in range(12):
                keys = [context + j + 1 for j in range(new)]
                if window is not None:
                    keys = [min(k, window) for k in keys]
                assert causal_pairs(new, context, window) == sum(keys)


def test_roofline_memory_bound_by_hand() -> None:
    """At 1 GB/s and 1 TFLOP/s both parts are bytes over bandwidth, computed by hand."""
    model = RooflineStepModel(TINY, MEMORY_BOUND, overhead_s=1e-3, per_seq_overhead_s=1e-4)
    step = model.predict(BATCH)
    # weights: layer matmuls 8*4*4 + 2*4*8 + 3*8*16 = 576, LM head 8*32 = 256, 2 bytes each;
    # activations per token: 2 * (2 * (4*8 + 2*3*4 + 3*16) + 8) = 432; 4 tokens.
    assert step.linear_s == pytest.approx((2 * (2 * 576 + 256) + 4 * 432) / 1e9)
    # KV per token 2*2*1*4*2 = 32 B; keys read 11 + 8 = 19; per new token 32 + 2*2*2*4*2 = 96.
    assert step.attention_s == pytest.approx((19 * 32 + 4 * 96) / 1e9)
    assert step.overhead_s == pytest.approx(1e-3 + 2 * 1e-4)


def test_roofline_compute_bound_by_hand() -> None:
    """At 1 MFLOP/s and huge bandwidth both parts are FLOPs over peak."""
    step = RooflineStepModel(TINY, COMPUTE_BOUND).predict(BATCH)
    # linear: 2 * 4 tokens * 2 layers * 576 + 2 * 2 seqs * 256; attention: 4*2*2*4 * 32 pairs.
    assert step.linear_s == pytest.approx((2 * 4 * 2 * 576 + 2 * 2 * 256) / 1e6)
    assert step.attention_s == pytest.approx(4 * 2 * 2 * 4 * (3 * 5 + 6 + 11) / 1e6)


def test_predict_equals_predict_split_and_empty_is_zero() -> None:
    """The batch form and the running-sums form agree exactly; an empty step costs nothing."""
    model = make_step_model("roofline", get_model("llama-2-7b"), get_gpu("a100-80gb"))
    batch = [(1, 100), (1, 2000), (512, 0), (64, 300)]
    assert model.predict(batch) == model.predict_split(2, 2100, [(512, 0), (64, 300)])
    assert model.predict([]).total_s == 0.0
    with pytest.raises(ValueError, match="new_tokens=0"):
        model.predict([(0, 5)])


def test_roofline_sliding_window_caps_decode_context() -> None:
    """Mistral's decode cost stops growing at the 4096 window; Llama-3-8B's keeps growing."""
    gpu = get_gpu("h100")
    mistral = make_step_model("roofline", get_model("mistral-7b"), gpu)
    llama = make_step_model("roofline", get_model("llama-3-8b"), gpu)
    assert mistral.predict([(1, 4095)] * 8) == mistral.predict([(1, 20000)] * 8)
    assert mistral.decode_context_cap == 4095
    assert llama.predict([(1, 20000)] * 8).attention_s > llama.predict([(1, 4095)] * 8).attention_s


def test_roofline_tensor_parallel_and_fp8() -> None:
    """tp=2 halves an MHA model's attention time; an fp8 KV cache cuts decode attention time."""
    model, gpu = get_model("llama-2-7b"), get_gpu("a100-80gb")
    batch = [(1, 1000)] * 32
    one, two = (make_step_model("roofline", model, gpu, tp).predict(batch) for tp in (1, 2))
    assert two.attention_s == pytest.approx(one.attention_s / 2)
    assert two.linear_s < one.linear_s
    fp8 = make_step_model("roofline", model, gpu, kv_cache_dtype="fp8").predict(batch)
    assert fp8.attention_s < 0.6 * one.attention_s


def test_roofline_options_in_spec() -> None:
    """Spec options scale efficiencies and set overheads; unknown options are refused."""
    model, gpu = get_model("llama-2-7b"), get_gpu("a100-80gb")
    base = make_step_model("roofline", model, gpu).predict([(1, 1000)] * 64)
    slow = make_step_model("roofline:hbm_eff=0.5, overhead_ms=3,per_seq_us=0", model, gpu,
                           extras=Extras(overlapped=False))
    step = slow.predict([(1, 1000)] * 64)
    assert step.attention_s == pytest.approx(2 * base.attention_s)
    assert step.overhead_s == pytest.approx(3e-3)
    with pytest.raises(ValueError, match="unknown roofline option 'speed=2'"):
        make_step_model("roofline:speed=2", model, gpu)
    with pytest.raises(ValueError, match="expected auto, roofline"):
        make_step_model("magic", model, gpu)
    with pytest.raises(ValueError, match="poly needs a file"):
        make_step_model("poly:", model, gpu)


def _poly_file(tmp_path: Path, **extra: Any) -> Path:
    data = {"format": "pagedsim-step-poly", "version": 1,
            "attention": {"const": 1e-3, "new_x_context": 1e-6, "context_tokens": 2e-6},
            "linear": {"const": 5e-3, "new_tokens": 1e-5},
            "overhead": {"num_seqs": 1e-4}, **extra}
    path = tmp_path / "poly.json"
    path.write_text(json.dumps(data))
    return path


def test_poly_from_json_by_hand(tmp_path: Path) -> None:
    """Each part is the dot product of its coefficients with the batch features."""
    model = make_step_model(f"poly:{_poly_file(tmp_path)}", get_model("llama-2-7b"),
                            get_gpu("a100-80gb"))
    assert isinstance(model, PolyStepModel)
    step = model.predict([(3, 5), (1, 10), (1, 20)])  # S 3, N 5, C 35, sum n*c 45
    assert step.attention_s == pytest.approx(1e-3 + 45e-6 + 35 * 2e-6)
    assert step.linear_s == pytest.approx(5e-3 + 5 * 1e-5)
    assert step.overhead_s == pytest.approx(3e-4)


def test_poly_clamps_and_validates(tmp_path: Path) -> None:
    """A negative part clamps to 0; unknown features, bad formats and other models are refused."""
    path = _poly_file(tmp_path, linear={"const": -1.0})
    step = PolyStepModel.from_file(path, get_model("llama-2-7b"), get_gpu("a100-80gb"))
    assert step.predict([(1, 10)]).linear_s == 0.0
    with pytest.raises(ValueError, match="unknown feature 'tokens'"):
        PolyStepModel.from_file(_poly_file(tmp_path, linear={"tokens": 1}),
                                get_model("llama-2-7b"), get_gpu("a100-80gb"))
    with pytest.raises(ValueError, match="field format"):
        PolyStepModel.from_file(_poly_file(tmp_path, format="x"), get_model("llama-2-7b"),
                                get_gpu("a100-80gb"))
    path = _poly_file(tmp_path, model="Llama-3-8B", gpu="H200-141GB")
    with pytest.raises(ValueError, match="measured for model Llama-3-8B on H200-141GB"):
        PolyStepModel.from_file(path, get_model("llama-2-7b"), get_gpu("h200"))


def table_csv(tmp_path: Path, header: str = "# model: meta-llama/Meta-Llama-3-8B\n"
              "# gpu: NVIDIA H200\n# tp: 1\n", extra_rows: str = "") -> Path:
    """A synthetic calibration CSV whose values are bilinear, so interpolation is exact."""
    rows = ["kind,batch,context,new_tokens,time_us"]
    for b in (1, 8, 64):
        for c in (0, 1024, 4096):
            rows.append(f"decode_attn,{b},{c},1,{5 + 0.5 * b + 0.002 * b * c}")
    for n in (16, 512, 2048):
        for c in (0, 2048):
            rows.append(f"prefill_attn,1,{c},{n},{3 + 0.01 * n + 0.00001 * n * c}")
    for t in (1, 256, 8192):
        rows.append(f"gemm,1,0,{t},{100 + 0.05 * t}")
    path = tmp_path / "calib.csv"
    path.write_text(header + "# measured on a synthetic machine\n" + "\n".join(rows) + "\n"
                    + extra_rows)
    return path


def test_table_interpolates_and_scales_by_layers(tmp_path: Path) -> None:
    """Per-layer microseconds interpolate at off-grid points and scale by 32 layers."""
    model = make_step_model(f"table:{table_csv(tmp_path)}", get_model("llama-3-8b"),
                            get_gpu("h200"))
    assert isinstance(model, TableStepModel)
    batch = [(1, 400)] * 5 + [(1, 600)] * 5 + [(300, 100)]  # 10 decodes at mean 500
    step = model.predict(batch)
    decode = 5 + 0.5 * 10 + 0.002 * 10 * 500
    prefill = 3 + 0.01 * 300 + 0.00001 * 300 * 100
    assert step.attention_s == pytest.approx(32 * (decode + prefill) * 1e-6)
    assert step.linear_s == pytest.approx(32 * (100 + 0.05 * 310) * 1e-6)


def test_table_extrapolates_above_and_clamps_below(tmp_path: Path) -> None:
    """Past the grid the last segment continues; below it the first point holds."""
    model = TableStepModel.from_file(table_csv(tmp_path), get_model("llama-3-8b"),
                                     get_gpu("h200"))
    big = model.predict([(1, 8192)] * 128)
    assert big.attention_s == pytest.approx(32 * (5 + 64 + 0.002 * 128 * 8192) * 1e-6)
    small = model.predict([(2, 0)])
    assert small.attention_s == pytest.approx(32 * (3 + 0.01 * 16) * 1e-6)


@pytest.mark.parametrize(("model", "gpu", "tp", "message"), [
    ("llama-2-7b", "h200", 1, "measured for model meta-llama/Meta-Llama-3-8B on NVIDIA H200"),
    ("llama-3-8b", "h100", 1, "this run uses Llama-3-8B on H100-80GB"),
    ("llama-3-8b", "h200", 2, r"\(tp=1\); this run uses .* \(tp=2\)"),
])
def test_table_refuses_other_setups(tmp_path: Path, model: str, gpu: str, tp: int,
                                    message: str) -> None:
    """A table measured for Llama-3-8B on one H200 refuses another model, GPU or tp."""
    with pytest.raises(ValueError, match=message):
        make_step_model(f"table:{table_csv(tmp_path)}", get_model(model), get_gpu(gpu), tp)


def test_table_refuses_custom_gpu_and_other_kv_dtype(tmp_path: Path) -> None:
    """Overridden GPU numbers, or a table measured with another KV dtype, are refused."""
    path = table_csv(tmp_path, header="# model: llama-3-8b\n# gpu: h200\n# kv_cache_dtype: bf16\n")
    with pytest.raises(ValueError, match="measured for"):
        make_step_model(f"table:{path}", get_model("llama-3-8b"), make_gpu("h200", tflops=500))
    with pytest.raises(ValueError, match="kv_cache_dtype bf16; this run uses fp8"):
        make_step_model(f"table:{path}", get_model("llama-3-8b"), get_gpu("h200"),
                        kv_cache_dtype="fp8")
    assert make_step_model(f"table:{path}", get_model("llama-3-8b"), get_gpu("h200")) is not None


@pytest.mark.parametrize(("header", "extra", "message"), [
    ("# gpu: h200\n", "", "missing header field 'model'"),
    ("# model: llama-3-8b\n# gpu: h200\n", "gemm,1,0,256,7\n", r"calib.csv:\d+: duplicate gemm"),
    ("# model: llama-3-8b\n# gpu: h200\n", "decode_attn,2,0,1,7\n",
     r"decode_attn grid lacks the point \(2, 1024\)"),
    ("# model: llama-3-8b\n# gpu: h200\n", "gemm,1,0,x,7\n", r"calib.csv:\d+: invalid literal"),
    ("# model: llama-3-8b\n# gpu: h200\n", "decode_attn,4,0,2,7\n", "need new_tokens = 1"),
    ("# model: llama-3-8b\n# gpu: h200\n", "softmax,1,0,1,7\n", "field kind 'softmax'"),
])
def test_table_bad_files_name_the_problem(tmp_path: Path, header: str, extra: str,
                                          message: str) -> None:
    """Missing headers, duplicates, incomplete grids and bad rows give one clear line."""
    path = table_csv(tmp_path, header=header, extra_rows=extra)
    with pytest.raises(ValueError, match=message):
        make_step_model(f"table:{path}", get_model("llama-3-8b"), get_gpu("h200"))


def test_table_missing_file(tmp_path: Path) -> None:
    """A table file that does not exist is a ValueError naming it."""
    with pytest.raises(ValueError, match=r"nope\.csv: cannot read"):
        make_step_model(f"table:{tmp_path / 'nope.csv'}", get_model("llama-3-8b"), get_gpu("h200"))


def test_committed_h200_calibration_table_loads_and_predicts() -> None:
    """The measured H200 table is accepted for Llama-3-8B on an H200 and refused elsewhere."""
    from pathlib import Path

    from sim.cost.gpus import get_gpu
    from sim.cost.models import get_model
    from sim.cost.step_model import make_step_model

    path = Path(__file__).resolve().parents[2] / "sim" / "calibration" / "h200_llama3_8b.csv"
    model = make_step_model(f"table:{path}", get_model("llama-3-8b"), get_gpu("h200-141gb"))
    small = model.predict([(1, 1000)] * 8)
    large = model.predict([(1, 1000)] * 128)
    assert 0 < small.attention_s < large.attention_s
    assert 0 < small.linear_s <= large.linear_s
    with pytest.raises(ValueError, match="measured for"):
        make_step_model(f"table:{path}", get_model("llama-2-7b"), get_gpu("h200-141gb"))
