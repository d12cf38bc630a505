"""benchmarks/step_errors.py: held-out split by shape and the error table."""
from __future__ import annotations

import json
from pathlib import Path

from tests.benchkit import load_benchmark
from tests.unit.test_step_fit import _artefact, _points


def test_error_report_on_synthetic_artefacts(tmp_path: Path) -> None:
    """The fit's held-out error on noise-free points is ~0; the roofline's is not."""
    errors = load_benchmark("step_errors")
    paths = [_artefact(tmp_path, _points(0.0, name=n), n, f"{n}.json")
             for n in ("Llama-3-8B", "Qwen3-14B")]
    held = [p for p in _points(0.0) if errors.held_out(p)]
    assert 0 < len(held) < len(_points(0.0))
    out = tmp_path / "rows.json"
    assert errors.main([*map(str, paths), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["Llama-3-8B"]
    held_rows = [r for r in rows if r["held"]]
    assert held_rows and all(abs(r["fit"]["total"] / r["total"] - 1) < 1e-3 for r in held_rows)
    assert max(abs(r["roofline"]["total"] / r["total"] - 1) for r in rows) > 0.2
    assert "calibrated" in rows[0]
