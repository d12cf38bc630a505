"""sim/results/rejections.py: rejected and truncated requests are counted per cause in
summary.json's warnings and on stderr, and the option each warning names admits them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
TINY = [str(DATA / "tiny_azure.csv"), "--no-progress", "--allocators", "paged,max"]


def _run(out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main([*TINY, "--out", str(out), *extra])
    return code, json.loads((out / "summary.json").read_text())


def _causes(summary: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {w["cause"]: w["allocators"] for w in summary["warnings"]}


def test_prompt_too_long_names_the_fix_and_the_fix_admits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tiny_azure.csv has one 4101-token prompt: rejected at max_model_len 4096 (Llama-2-7B's
    context), so the fix names a longer-context model; rerun with it, nothing is rejected."""
    code, summary = _run(tmp_path / "a", "--num-gpu-blocks", "400")
    assert code == 0
    entry = summary["warnings"][0]
    assert entry["cause"] == "prompt_too_long" and entry["allocators"] == {"paged": 1, "max": 1}
    assert entry["longest_tokens"] == 4101 and entry["num_requests"] == 24
    assert entry["fix"] == "--model llama-3-8b --max-model-len 8192"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"simulate.py: warning: {entry['message']}"]
    assert "1 of 24 requests (4.2 %) rejected by every allocator" in err[0]
    code, fixed = _run(tmp_path / "b", "--num-gpu-blocks", "1200", *entry["fix"].split())
    assert code == 0 and "prompt_too_long" not in _causes(fixed)
    assert all(s["num_rejected"] == 0 for s in fixed["allocators"].values())


def test_truncated_outputs_are_counted(tmp_path: Path) -> None:
    """At max_model_len 1600, the 1500-token prompt with 200 outputs is cut, and counted."""
    code, summary = _run(tmp_path / "a", "--num-gpu-blocks", "400", "--max-model-len", "1600")
    causes = _causes(summary)
    assert code == 0 and causes["truncated"] == {"paged": 1, "max": 1}
    assert causes["truncated"]["paged"] == summary["counters"]["paged"]["num_truncated"]
    entry = next(w for w in summary["warnings"] if w["cause"] == "truncated")
    assert "would keep their whole output" in entry["message"]


def test_requests_larger_than_the_pool_name_the_pool_size(tmp_path: Path) -> None:
    """A 40-block pool cannot hold the longer requests: paged rejects them as exceeds_pool;
    the --num-gpu-blocks the warning names admits every one of them."""
    code, summary = _run(tmp_path / "a", "--num-gpu-blocks", "40", "--max-model-len", "4096",
                         "--allocators", "paged")
    entry = next(w for w in summary["warnings"] if w["cause"] == "exceeds_pool")
    assert code == 0 and entry["allocators"]["paged"] > 0
    blocks = entry["fix"].split()[1]
    _, fixed = _run(tmp_path / "b", "--num-gpu-blocks", blocks, "--allocators", "paged")
    assert "exceeds_pool" not in _causes(fixed)


def test_mooncake_defaults_reject_71_percent(shared_traces: Path, tmp_path: Path) -> None:
    """The issue's figure: 357 of the first 500 Mooncake requests (71.4 %) at the defaults."""
    trace = shared_traces / "mooncake_conversation_trace.jsonl"
    code = main([str(trace), "--limit", "500", "--allocators", "paged", "--no-progress",
                 "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    entry = summary["warnings"][0]
    assert code == 0 and entry["cause"] == "prompt_too_long"
    assert entry["allocators"] == {"paged": 357}
    assert "(71.4 %)" in entry["message"] and "--max-model-len" in entry["fix"]
