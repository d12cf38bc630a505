"""kernels.validate on CUDA at a real head layout (Llama-3-8B: 32 q / 8 kv heads x 128)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels.validate import Options, validate_log
from kernels.validate.mutate import Mutation
from tests.unit.validate_logkit import scenario_log

pytestmark = pytest.mark.gpu

LAYOUT = {"heads": (32, 8, 128), "block_size": 16, "num_blocks": 64}


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_scenario_validates_on_cuda(tmp_path: Path, dtype: str) -> None:
    """Every step passes within the dtype's tolerance; caches and timing are reported."""
    log = scenario_log(tmp_path / "log.jsonl.gz", dtype=dtype, **LAYOUT)
    [res] = validate_log(log, Options(device="cuda"))
    assert res.failure is None
    assert res.num_validated == res.num_steps == 11
    assert 0 < res.max_error < res.tolerance
    assert res.memory["allocated"] and res.memory["free_after_bytes"] > 0
    assert res.memory["all_layers_bytes"] == 2 * 2 * 64 * 16 * 8 * 128 * (4 if dtype == "fp32" else 2)
    assert res.timing["steps"] == 11 and res.timing["median_abs_rel_error"] >= 0
    assert all(row["measured_layer_s"] > 0 for row in res.per_step)


@pytest.mark.parametrize("mutation", ["table:0", "copy:0:1", "slot:1"])
def test_mutations_caught_on_cuda(tmp_path: Path, mutation: str) -> None:
    """bf16 at real sizes still catches each mutation through the attention comparison."""
    log = scenario_log(tmp_path / "log.jsonl.gz", dtype="bf16", **LAYOUT)
    opts = Options(device="cuda", check_slots=False, timing=False,
                   mutation=Mutation.parse(mutation))
    [res] = validate_log(log, opts)
    assert res.mutation is not None
    assert res.failure_kind == "attention", res.failure


def test_cuda_and_cpu_rows_agree() -> None:
    """The K/V draw is the same on both devices (so CPU and GPU runs check the same data)."""
    from kernels.validate.kv_content import KVContent, extend_hashes, initial_hash

    h = extend_hashes(initial_hash(1), list(range(100)))
    rows = [KVContent(32, 8, 128, torch.bfloat16, torch.device(d)).kv_rows(h)[0].cpu()
            for d in ("cpu", "cuda")]
    assert torch.equal(rows[0], rows[1])


FP8 = {"kv_cache_dtype": "fp8", "k_scale": 0.05, "v_scale": 0.02}


def test_fp8_scenario_validates_on_cuda(tmp_path: Path) -> None:
    """An fp8 (e4m3) cache with the log's scales: every step within the bf16 bound, 1-byte rows."""
    log = scenario_log(tmp_path / "log.jsonl.gz", dtype="bf16", arch=FP8, **LAYOUT)
    [res] = validate_log(log, Options(device="cuda"))
    assert res.failure is None, res.failure
    assert res.num_validated == res.num_steps == 11
    assert 0 < res.max_error < res.tolerance
    assert "fp8" in res.dtype
    assert res.memory["all_layers_bytes"] == 2 * 2 * 64 * 16 * 8 * 128


def test_fp8_mutation_caught_on_cuda(tmp_path: Path) -> None:
    """A wrong table entry is still caught through fp8 attention."""
    log = scenario_log(tmp_path / "log.jsonl.gz", dtype="bf16", arch=FP8, **LAYOUT)
    opts = Options(device="cuda", check_slots=False, timing=False,
                   mutation=Mutation.parse("table:0"))
    [res] = validate_log(log, opts)
    assert res.failure_kind == "attention", res.failure
