"""sim/cost/api_path.py: a request's path outside the engine is counted once on the way in
and once on the way out, moves TTFT and E2EL but not TPOT or ITL, holds a client slot until
the last token arrives, and is off for explicit roofline runs (the pinned goldens)."""
from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main
from sim.config import CostConfig, OptionError
from sim.cost.api_path import (
    DEFAULT_API_OUTPUT_MS,
    DEFAULT_API_OVERHEAD_MS,
    DEFAULT_TOKENIZE_US_PER_TOKEN,
    ApiPath,
    entry_times,
    resolve_api_path,
)
from sim.engine import Costs, RunResult, replay
from tests.unit.simkit import STEP_S, FixedStep, make_trace, rows, run_config

IN_MS, TOK_US, OUT_MS = 3.0, 10.0, 4.0


def _run(trace: Any, path: bool, **options: Any) -> RunResult:
    config = run_config(**options)
    if path:
        config = replace(config, cost=CostConfig(api_overhead_ms=IN_MS,
                                                 tokenize_us_per_token=TOK_US,
                                                 api_output_ms=OUT_MS))
    return replay("paged", config, trace, Costs(FixedStep(), lambda blocks: 0.0))


def test_the_path_is_on_for_the_default_step_models_only() -> None:
    """auto, fit and calibrated get the defaults; roofline, poly and table do not unless a
    value or --api-overhead is given; --no-api-overhead wins over everything."""
    default = ApiPath(DEFAULT_API_OVERHEAD_MS * 1e-3, DEFAULT_TOKENIZE_US_PER_TOKEN * 1e-6,
                      DEFAULT_API_OUTPUT_MS * 1e-3)
    for spec in ("auto", "fit", "fit:x.json", "calibrated"):
        assert resolve_api_path(spec, None, None, None, None) == default
    for spec in ("roofline", "roofline:hbm_eff=0.8", "poly:p.json", "table:t.csv"):
        assert not resolve_api_path(spec, None, None, None, None).on
    assert resolve_api_path("roofline", True, None, None, None) == default
    given = resolve_api_path("roofline", None, 5.0, None, None)
    assert given.input_s == pytest.approx(5e-3) and given.output_s == default.output_s
    assert not resolve_api_path("auto", False, 5.0, 1.0, 1.0).on
    with pytest.raises(OptionError):
        CostConfig(api_output_ms=-1.0)


def test_requests_join_the_queue_in_send_order() -> None:
    """A long prompt's tokenisation delays the short one sent just after it (one event loop)."""
    path = ApiPath(0.002, 1e-5, 0.0)
    assert entry_times([0.0, 0.001, 0.5], [1000, 10, 10], path) == pytest.approx(
        [0.012, 0.012, 0.5021])


def test_a_lone_request_pays_the_path_once_each_way() -> None:
    """One request: it is scheduled after the inbound time (in + us x prompt), and its first
    and last tokens reach the client the outbound time after the steps that sampled them."""
    trace = make_trace([(0.0, 100, 5)])
    off, on = rows(_run(trace, False))[0], rows(_run(trace, True))[0]
    inbound = (IN_MS + TOK_US * 100 / 1000) / 1000
    outbound = OUT_MS / 1000
    assert on["arrival_s"] == off["arrival_s"] == 0.0
    assert on["first_scheduled_s"] - off["first_scheduled_s"] == pytest.approx(inbound)
    assert on["first_token_s"] - off["first_token_s"] == pytest.approx(inbound + outbound)
    assert on["finish_s"] - off["finish_s"] == pytest.approx(inbound + outbound)
    assert on["finish_s"] - on["first_token_s"] == pytest.approx(4 * STEP_S)


def test_a_client_slot_is_held_until_the_last_token_arrives() -> None:
    """One slot, four requests at 0: each is sent when the previous one's last token reached
    the client, so every request takes in + 5 steps + out from its send."""
    trace = make_trace([(0.0, 16, 5)] * 4)
    out = rows(_run(trace, True, max_concurrency=1))
    for prev, cur in itertools.pairwise(out):
        assert cur["arrival_s"] == prev["finish_s"]
    path = (IN_MS + TOK_US * 16 / 1000 + OUT_MS) / 1000
    for r in out:
        assert r["finish_s"] - r["arrival_s"] == pytest.approx(5 * STEP_S + path)


def _bench(tmp_path: Path, name: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / name
    args = ["--dataset-name", "random", "--num-prompts", "4", "--random-input-len", "300",
            "--random-output-len", "12", "--max-concurrency", "1", "--model", "llama-3-8b",
            "--gpu", "h100-80gb", "--allocators", "paged", "--no-progress", "--out", str(out),
            *extra]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    config = json.loads((out / "config.json").read_text())
    return {**summary["bench"]["allocators"]["paged"], "api_path": config["api_path"]}


def test_ttft_and_e2el_move_tpot_and_itl_do_not(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The default run against --no-api-overhead: TTFT and E2EL grow by the whole path at
    one request in flight, TPOT and ITL are the same; the header and config.json say so."""
    on = _bench(tmp_path, "on", "--api-overhead-ms", "7", "--api-output-ms", "5")
    assert "API path 7 ms + 2 us/prompt token in, 5 ms out (a prediction)" in (
        capsys.readouterr().out)
    off = _bench(tmp_path, "off", "--no-api-overhead")
    assert "API path off" in capsys.readouterr().out
    path_ms = 7 + DEFAULT_TOKENIZE_US_PER_TOKEN * 300 / 1000 + 5
    for key in ("mean_ttft_ms", "median_ttft_ms", "mean_e2el_ms"):
        assert on[key] - off[key] == pytest.approx(path_ms, rel=1e-6), key
    for key in ("mean_tpot_ms", "median_itl_ms", "p99_itl_ms", "mean_itl_ms"):
        assert on[key] == pytest.approx(off[key], rel=1e-9), key
    assert on["duration"] - off["duration"] == pytest.approx(4 * path_ms / 1000, rel=1e-6)
    assert on["api_path"]["api_overhead_ms"] == 7 and off["api_path"]["api_output_ms"] == 0


def test_a_negative_value_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--limit", "2", "--tokenize-us-per-token", "-1", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "--tokenize-us-per-token must be >= 0" in capsys.readouterr().err
