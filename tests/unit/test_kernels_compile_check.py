"""The attention kernel compiles for Hopper (sm_90) on this CPU machine (kernels/compile_check.py:
Triton's NVIDIA backend and its bundled ptxas), for the transposed-V read, its window form and
a mixed launch: what the interpreter cannot check. A subprocess, with the interpreter off
(the other kernel tests turn it on for the whole process)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
triton = pytest.importorskip("triton")
NVIDIA_BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


@pytest.mark.skipif(not (NVIDIA_BIN / "ptxas").exists() and not shutil.which("ptxas"),
                    reason="triton's NVIDIA backend has no ptxas here")
def test_kernel_compiles_for_hopper(tmp_path: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path),
           "TRITON_DEFAULT_FP_FUSION": "1"}
    res = subprocess.run([sys.executable, "-m", "kernels.compile_check", "--quick"], env=env, check=False,
                         capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 3 and all(": ok, " in line for line in lines), res.stdout
