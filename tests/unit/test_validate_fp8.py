"""kernels.validate on fp8 logs (`model.kv_cache_dtype: fp8`): header fields, replay, mutations."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from kernels.cache_layout import is_transposed_v, v_transposed_for
from kernels.fp8 import quantize
from kernels.validate import Options, validate_log
from kernels.validate.log import LogError, iter_log
from kernels.validate.mutate import Mutation
from kernels.validate.setup import Layout, make_replay
from tests.unit.validate_logkit import scenario_log

FP8 = {"kv_cache_dtype": "fp8", "k_scale": 0.05, "v_scale": 2.0}


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_log(tmp_path_factory.mktemp("fp8") / "log.jsonl.gz", dtype="bf16", arch=FP8)


def test_fp8_scenario_passes(log: Path) -> None:
    """Every step of the standard scenario validates over an e4m3 cache with the log's scales."""
    [res] = validate_log(log, Options())
    assert res.failure is None, res.failure
    assert res.num_validated == res.num_steps
    assert 0 < res.max_error < res.tolerance
    assert res.dtype == "bfloat16, kv cache fp8_e4m3"
    assert res.memory["all_layers_bytes"] == 2 * 2 * 40 * 4 * 1 * 16 * 1
    want = "transposed" if v_transposed_for(torch.float8_e4m3fn) else "token_major"
    assert res.memory["v_layout"] == want


def test_fp8_cache_holds_quantised_rows(log: Path) -> None:
    """The replay's cache and a sequence's reference rows are the same e4m3 bits."""
    hdr = next(iter_log(log))
    assert (hdr.kv_cache_dtype, hdr.k_scale, hdr.v_scale) == ("fp8_e4m3", 0.05, 2.0)
    layout = Layout.from_header(hdr, None, None, None)
    rp, _ = make_replay(hdr, layout, torch.device("cpu"))
    assert rp.k_cache.dtype == torch.float8_e4m3fn
    assert is_transposed_v(rp.v_cache) == v_transposed_for(rp.v_cache.dtype)
    state = rp.new_state()
    hashes, k, v = rp.extend(state, [5, 6, 7])
    rp.queue_write(rp.slots_of([3], 0, 3), hashes, k, v)
    rp.flush()
    assert torch.equal(rp.k_cache[3, :3].view(torch.uint8), state.k[:3].view(torch.uint8))
    assert torch.equal(state.v[:3].view(torch.uint8), quantize(v, 2.0).view(torch.uint8))


def test_fp8_mutation_caught(log: Path) -> None:
    """A table entry pointed at another live block still fails the comparison."""
    opts = Options(check_slots=False, timing=False, mutation=Mutation.parse("table:0"))
    [res] = validate_log(log, opts)
    assert res.failure_kind == "attention", res.failure


@pytest.mark.parametrize("field,value,match", [
    ("kv_cache_dtype", "fp8_e5m2", "fp8 \\(e4m3\\)"),
    ("k_scale", 0, "model.k_scale"),
    ("v_scale", "1", "model.v_scale"),
])
def test_bad_fp8_header_fields(tmp_path: Path, log: Path, field: str, value: object,
                               match: str) -> None:
    """A bad kv_cache_dtype or scale is one LogError naming the field."""
    with gzip.open(log, "rt") as fh:
        lines = [json.loads(line) for line in fh]
    lines[0]["model"][field] = value
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in lines)
    with pytest.raises(LogError, match=match):
        validate_log(bad, Options())
