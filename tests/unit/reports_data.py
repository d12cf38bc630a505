"""Small real simulator runs shared by the tests/unit/test_reports_*.py files.

Each run is made once per test session (in-process through ``sim.cli.main``, or
``sim.sweep.run.main`` for the sweep) under pytest's session temporary directory and reused by
every reports test file that asks for it, so the whole reports suite stays fast. Every run
uses the plain roofline step model: the reports read only the results, and the default
calibrated model spends most of a small run fitting its coefficients.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

_CACHE: dict[str, Path] = {}
BASE = ["--no-progress", "--num-gpu-blocks", "300", "--step-model", "roofline"]


def _simulate(root: Path, name: str, argv: list[str]) -> Path:
    from sim.cli import main

    out = root / name
    with contextlib.redirect_stdout(io.StringIO()):
        code = main([*argv, *BASE, "--out", str(out)])
    assert code == 0, f"simulate.py {argv} exited {code}"
    return out


def _cached(factory: pytest.TempPathFactory, name: str, argv: list[str]) -> Path:
    if name not in _CACHE:
        _CACHE[name] = _simulate(factory.getbasetemp() / "reports_runs", name, argv)
    return _CACHE[name]


def full_run(factory: pytest.TempPathFactory) -> Path:
    """Every built-in allocator on 40 requests of the default workload, prefix caching on."""
    return _cached(factory, "full", ["--limit", "40", "--rate-scale", "4"])


def single_run(factory: pytest.TempPathFactory) -> Path:
    """One allocator (max), prefix caching off."""
    return _cached(factory, "single", ["--limit", "15", "--allocators", "max",
                                       "--no-prefix-caching"])


def one_step_run(factory: pytest.TempPathFactory) -> Path:
    """One request with a one-token output: a single engine step."""
    if "one_step" not in _CACHE:
        trace = factory.getbasetemp() / "reports_runs" / "one_request.csv"
        trace.parent.mkdir(parents=True, exist_ok=True)
        trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                         "2023-11-16 18:15:46.6805900,40,1\n", encoding="utf-8")
        _CACHE["one_step"] = _simulate(trace.parent, "one_step",
                                       [str(trace), "--allocators", "paged,max"])
    return _CACHE["one_step"]


def rate_runs(factory: pytest.TempPathFactory) -> list[Path]:
    """paged and max at two request rates and two block sizes (three result dirs)."""
    cells = {"r1_b16": ["--rate-scale", "1"], "r8_b16": ["--rate-scale", "8"],
             "r1_b32": ["--rate-scale", "1", "--block-size", "32"]}
    return [_cached(factory, name, ["--limit", "20", "--allocators", "paged,max", *extra])
            for name, extra in cells.items()]


def sweep_dir(factory: pytest.TempPathFactory) -> Path:
    """A real ``python -m sim.sweep`` directory: rate_scale 1 and 8, paged and max."""
    if "sweep" not in _CACHE:
        from sim.sweep.run import main

        root = factory.getbasetemp() / "reports_runs"
        root.mkdir(parents=True, exist_ok=True)
        spec = root / "sweep.toml"
        spec.write_text('[options]\nlimit = 15\nnum_gpu_blocks = 300\nallocators = "paged,max"\n'
                        'step_model = "roofline"\n[axes]\nrate_scale = [1, 8]\n', encoding="utf-8")
        out = root / "sweep"
        with contextlib.redirect_stdout(io.StringIO()):
            code = main([str(spec), "--out", str(out), "--workers", "1", "--no-progress"])
        assert code == 0, f"sim.sweep exited {code}"
        _CACHE["sweep"] = out
    return _CACHE["sweep"]


def capacity_dir(factory: pytest.TempPathFactory) -> Path:
    """A real ``python -m sim.sweep --capacity`` directory: paged and max, a loose search."""
    if "capacity" not in _CACHE:
        from sim.sweep.run import main

        root = factory.getbasetemp() / "reports_runs"
        root.mkdir(parents=True, exist_ok=True)
        spec = root / "capacity.toml"
        spec.write_text('[options]\nlimit = 15\nnum_gpu_blocks = 300\nallocators = "paged,max"\n'
                        'step_model = "roofline"\n'
                        "[capacity]\nslo = 0.02\ntolerance = 0.5\nmax_rate_scale = 16\n",
                        encoding="utf-8")
        out = root / "capacity_search"
        with contextlib.redirect_stdout(io.StringIO()):
            code = main([str(spec), "--out", str(out), "--capacity", "--workers", "1",
                         "--no-progress"])
        assert code == 0, f"sim.sweep --capacity exited {code}"
        _CACHE["capacity"] = out
    return _CACHE["capacity"]
