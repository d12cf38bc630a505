"""sim/workload/workload.py: a row whose prompt will be rejected is never materialised."""
from __future__ import annotations

from pathlib import Path

import traces
from sim.cli import resolve
from sim.config import Options
from sim.workload.source import load_input
from sim.workload.workload import Workload


def test_prefetch_skips_rows_that_will_be_rejected(tmp_path: Path) -> None:
    """A 16M-token prompt (over max_model_len) gets no token array; its neighbours do."""
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:15:{i:02d}.0000000,{16_000_000 if i == 3 else 50},10"
             for i in range(8)]
    path = tmp_path / "huge.csv"
    path.write_text("\n".join(rows) + "\n")
    config = resolve(Options(trace=str(path), allocators="paged", out=str(tmp_path / "o")))
    trace, _ = load_input(config.workload, traces)
    workload = Workload(trace, config, None)
    workload._prefetch(0)
    assert sorted(workload.ready) == [0, 1, 2, 4, 5, 6, 7]
    assert workload.make_group(3).reject_reason == "prompt_too_long"
    assert all(len(tokens) == 60 for tokens, _ in workload.ready.values())
