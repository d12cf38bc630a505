"""A run leaves no reference cycles per request or per step (sim/engine.py pauses the cyclic
collector while SimPy runs, which is only safe if reference counting frees everything)."""
from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from tests.unit.simkit import make_trace, simulate


def _cyclic_garbage(num_requests: int, name: str, **options: Any) -> int:
    rng = np.random.default_rng(3)
    rows = [(0.02 * i, int(rng.integers(8, 120)), int(rng.integers(2, 60)))
            for i in range(num_requests)]
    trace = make_trace(rows)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        result = simulate(trace, name, **options)
        # Counted while the result (and the request log in it) is still alive.
        garbage = gc.collect()
        assert result.summary["num_finished"] + result.summary["num_rejected"] == num_requests
        return garbage
    finally:
        if was_enabled:
            gc.enable()


@pytest.mark.parametrize(("name", "options"), [
    ("paged", {}),
    ("paged", {"num_gpu_blocks": 24}),
    ("paged", {"fast": False, "n": 2, "sampling_mode": "cow"}),
    ("paged", {"beam_width": 2}),
    ("paged-nocache", {"preemption": "swap", "num_gpu_blocks": 24, "num_cpu_blocks": 64}),
    ("max", {}),
])
def test_no_cycles_per_request(name: str, options: dict[str, Any]) -> None:
    """Four times the requests leave (almost) the same cyclic garbage: the manager's linked
    blocks and such, built once per run, but nothing per request or step."""
    small = _cyclic_garbage(40, name, **options)
    large = _cyclic_garbage(160, name, **options)
    assert large - small < 40, (small, large)
