"""Importing the allocator package loads neither torch, simpy nor numpy (STYLE section 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("torch", "simpy", "numpy", "pandas", "triton", "matplotlib")


def loaded_after(statement: str) -> list[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=REPO
    )
    return json.loads(out.stdout)


def test_import_allocator_is_stdlib_only() -> None:
    """`import allocator` and a star import load none of the heavy packages."""
    modules = loaded_after("import allocator; from allocator import *")
    assert "allocator.kv_cache_manager" in modules
    assert [m for m in FORBIDDEN if m in modules] == []


def test_allocator_modules_import_nothing_heavy() -> None:
    """Every allocator module except block_table imports without numpy and the rest."""
    names = sorted(
        p.stem
        for p in (REPO / "allocator").glob("*.py")
        if p.stem not in ("__init__", "block_table")
    )
    modules = loaded_after("; ".join(f"import allocator.{name}" for name in names))
    assert [m for m in FORBIDDEN if m in modules] == []


def test_block_table_is_the_numpy_door() -> None:
    """allocator.BlockTable is reachable lazily and is what brings numpy in."""
    modules = loaded_after("import allocator; allocator.BlockTable")
    assert "numpy" in modules and "allocator.block_table" in modules
