"""Tests of the kernels package plumbing (kernels/__init__.py, kernels/launch.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels.launch import as_block_tables, as_int_tensor, check_head_size, check_kv_cache

ROOT = Path(__file__).resolve().parents[2]

# A CPU decode launched in a process where triton was imported in compiled mode (no
# TRITON_INTERPRET): the per-launch dispatch must still interpret it.
_COMPILED_MODE_SCRIPT = """
import triton, torch
from triton.runtime.jit import JITFunction
from kernels.attention_kernel import paged_attention_kernel
from kernels.decode_attention import paged_decode_attention
from kernels.reference import ref_decode_attention, rel_error_per_seq_head
assert isinstance(paged_attention_kernel, JITFunction)
torch.manual_seed(0)
k = torch.randn(4, 8, 1, 16); v = torch.randn(4, 8, 1, 16); q = torch.randn(2, 2, 16)
out = paged_decode_attention(q, k, v, [[1, 2], [3]], [12, 5])
ref = ref_decode_attention(q, k, v, [[1, 2], [3]], [12, 5])
print(float(rel_error_per_seq_head(out, ref).max()))
"""


def _python(code: str, **env_changes: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    env.update({k: v for k, v in env_changes.items() if v is not None})
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def test_import_kernels_loads_neither_torch_nor_triton():
    """`import kernels` is light: torch and triton load only when a kernel is used."""
    res = _python("import sys, kernels; print('torch' in sys.modules, 'triton' in sys.modules)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False"]


def test_cpu_launch_interprets_even_when_triton_imported_compiled():
    """With TRITON_INTERPRET unset before triton's import, CPU launches still run interpreted."""
    res = _python(_COMPILED_MODE_SCRIPT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert float(res.stdout.strip().splitlines()[-1]) < 1e-5


def test_block_tables_are_padded_with_the_null_block():
    """Ragged list tables become an int32 tensor padded with block 0."""
    table = as_block_tables([[5, 6, 7], [2], []], torch.device("cpu"))
    assert table.dtype == torch.int32
    assert table.tolist() == [[5, 6, 7], [2, 0, 0], [0, 0, 0]]
    with pytest.raises(ValueError, match="int32"):
        as_block_tables(torch.zeros((2, 2), dtype=torch.int64), torch.device("cpu"))
    assert as_int_tensor(torch.tensor([1, 2]), torch.device("cpu"), "x").dtype == torch.int32


def test_cache_and_head_size_checks():
    """Mismatched K/V caches, non-contiguous heads and odd head sizes are rejected."""
    k = torch.zeros((4, 8, 2, 16))
    assert check_kv_cache(k, k.clone()) == (4, 8, 2, 16)
    with pytest.raises(ValueError, match="equal 4-D"):
        check_kv_cache(k, torch.zeros((4, 8, 2, 32)))
    with pytest.raises(ValueError, match="contiguous"):
        strided = torch.zeros((4, 8, 2, 32))[..., ::2]
        check_kv_cache(strided, strided)
    with pytest.raises(ValueError, match="power of two"):
        check_head_size(96)
