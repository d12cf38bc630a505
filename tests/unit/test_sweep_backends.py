"""The Ray backend: a local Ray instance (2 CPUs) gives the same merged sweep as the pool."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sim.sweep.backends import BackendError, LocalBackend, RayBackend, import_ray
from sim.sweep.run import run_sweep
from sim.sweep.spec import load_spec
from tests.unit.test_sweep_run import GRID, TRACE


def without_wall(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame if "wall" in c])


@pytest.mark.slow
def test_ray_and_local_give_identical_merges(tmp_path: Path) -> None:
    """The 2 x 2 grid on local Ray equals the process-pool sweep, and each Ray worker loads
    the trace once for all its cells."""
    pytest.importorskip("ray")
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "grid.toml").write_text(GRID)
    spec = load_spec(tmp_path / "grid.toml")
    with LocalBackend(2) as local:
        expected = run_sweep(spec, tmp_path / "local", local, progress=False)
    with RayBackend(None, num_cpus=2) as ray_backend:
        got = run_sweep(spec, tmp_path / "ray", ray_backend, progress=False)
        assert import_ray().is_initialized()
    assert not import_ray().is_initialized()
    assert got.num_run == 4 and got.num_failed == 0
    pd.testing.assert_frame_equal(without_wall(got.frame), without_wall(expected.frame))
    on_disk = pd.read_parquet(tmp_path / "ray" / "sweep.parquet")
    pd.testing.assert_frame_equal(on_disk, got.frame)
    for record in got.records:
        assert record["worker"]["trace_loads"] == 1
        marker = tmp_path / "ray" / "cells" / record["name"] / "cell.json"
        assert json.loads(marker.read_text())["summary"] == record["summary"]


def test_missing_ray_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the ray package, --ray fails with one line naming the extra to install."""
    import builtins

    real_import = builtins.__import__

    def no_ray(name: str, *args: object, **kwargs: object) -> object:
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(BackendError, match=r"pip install 'pagedsim\[ray\]'"):
        RayBackend(None).__enter__()
