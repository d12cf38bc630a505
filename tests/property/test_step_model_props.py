"""Property tests for the step-time models: more work is never faster; both call forms agree."""
from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.gpus import get_gpu
from sim.cost.models import get_model
from sim.cost.step_model import (
    PolyStepModel,
    RooflineStepModel,
    StepModel,
    StepTime,
    TableStepModel,
)
from sim.cost.step_poly import Coefficients
from sim.cost.step_table import load_calibration

ENTRY = st.tuples(st.integers(1, 3000), st.integers(0, 40000))
BATCH = st.lists(ENTRY, min_size=1, max_size=12)
H100 = get_gpu("h100")
ROOFLINES = [RooflineStepModel(get_model(name), H100) for name in ("llama-2-7b", "mistral-7b")]
_COEF = st.floats(0.0, 1e-3, allow_nan=False)
COEF = st.tuples(_COEF, _COEF, _COEF, _COEF, _COEF, _COEF)
CALIBRATION = """# model: llama-3-8b
# gpu: h200
kind,batch,context,new_tokens,time_us
""" + "\n".join(
    [f"decode_attn,{b},{c},1,{4 + 0.3 * b + 0.001 * b * c + 0.0005 * c}"
     for b in (1, 16, 128) for c in (0, 2048, 16384)]
    + [f"prefill_attn,1,{c},{n},{2 + 0.02 * n + 1e-5 * n * c}"
       for n in (2, 256, 4096) for c in (0, 8192)]
    + [f"gemm,1,0,{t},{90 + 0.04 * t}" for t in (1, 64, 1024, 8192)]) + "\n"


def _load_table() -> TableStepModel:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calib.csv"
        path.write_text(CALIBRATION)
        return TableStepModel(load_calibration(path), get_model("llama-3-8b"))


TABLE = _load_table()


def _grown(batch: list[tuple[int, int]], index: int, what: str) -> list[tuple[int, int]]:
    new, context = batch[index % len(batch)]
    grown = list(batch)
    if what == "append":
        return [*grown, (new, context)]
    grown[index % len(batch)] = (new + 1, context) if what == "new" else (new, context + 1)
    return grown


def _no_faster(model: StepModel, batch: list[tuple[int, int]], more: list[tuple[int, int]]) -> None:
    before, after = model.predict(batch), model.predict(more)
    assert after.total_s >= before.total_s - 1e-15
    assert after.attention_s >= before.attention_s - 1e-15
    assert after.linear_s >= before.linear_s - 1e-15


@settings(max_examples=60, deadline=None)
@given(BATCH, st.integers(0, 100), st.sampled_from(["new", "context", "append"]),
       st.sampled_from(ROOFLINES))
def test_roofline_more_tokens_never_faster(batch: list[tuple[int, int]], index: int, what: str,
                                          model: RooflineStepModel) -> None:
    """Adding a new token, a context token or a sequence never shortens a roofline step."""
    _no_faster(model, batch, _grown(batch, index, what))


@settings(max_examples=40, deadline=None)
@given(BATCH, st.integers(0, 100), st.sampled_from(["new", "context", "append"]),
       COEF, COEF, COEF)
def test_poly_with_nonnegative_coefficients_is_monotone(
        batch: list[tuple[int, int]], index: int, what: str, attention: Coefficients,
        linear: Coefficients, overhead: Coefficients) -> None:
    """With non-negative coefficients a poly step never gets shorter with more work."""
    model = PolyStepModel({"attention": attention, "linear": linear, "overhead": overhead})
    _no_faster(model, batch, _grown(batch, index, what))


@settings(max_examples=40, deadline=None)
@given(st.lists(ENTRY, min_size=1, max_size=12), st.integers(0, 100),
       st.sampled_from(["new", "context"]))
def test_table_monotone_in_tokens_on_monotone_data(batch: list[tuple[int, int]], index: int,
                                                   what: str) -> None:
    """On increasing calibration data, more context or more prefill tokens never speed a step."""
    batch = [(new if new > 1 else 2, context) for new, context in batch]  # prefill chunks only
    _no_faster(TABLE, batch, _grown(batch, index, what))
    decodes = [(1, context) for _, context in batch]
    _no_faster(TABLE, decodes, _grown(decodes, index, "context"))


@settings(max_examples=60, deadline=None)
@given(BATCH, st.sampled_from(ROOFLINES))
def test_predict_matches_predict_split(batch: list[tuple[int, int]],
                                       model: RooflineStepModel) -> None:
    """Running sums of the decodes give exactly the result of the full batch."""
    cap = model.decode_context_cap
    decodes = [min(c, cap) if cap is not None else c for n, c in batch if n == 1]
    prefills = [(n, c) for n, c in batch if n > 1]
    expected: StepTime = model.predict_split(len(decodes), sum(decodes), prefills)
    assert model.predict(batch) == expected
