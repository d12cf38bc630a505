"""Shared pytest configuration: GPU tests are skipped when no CUDA device exists."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    # torch is imported only when a GPU test was collected: it costs seconds per run.
    if not gpu_items or _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip_gpu)


@pytest.fixture
def shared_traces() -> Path:
    """Directory of the real traces beside the checkout; skips the test when absent."""
    override = os.environ.get("PAGEDSIM_SHARED_TRACES")
    path = Path(override) if override else SHARED_TRACES
    if not path.is_dir():
        pytest.skip(f"real traces not found at {path}")
    return path
