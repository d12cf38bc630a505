"""The release options (sim/release.py): --vllm-version and --vllm-override resolve into the
profile the run follows, its engine defaults apply, it is printed and written to config.json,
and a bad value is one line naming the option, exit status 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import traces
from allocator.profiles import VERSIONS, profile_for
from sim.cli import describe, main, parse_options, resolve
from sim.config import OptionError, Options, SchedulerConfig
from sim.release import gpu_memory_utilization, max_in_flight_tokens, resolve_profile
from sim.workload.source import load_input

TINY = ["--limit", "12", "--num-gpu-blocks", "200", "--allocators", "paged", "--no-progress"]


@pytest.mark.parametrize("argv, option", [
    (["--vllm-version", "0.13"], "--vllm-version"),
    (["--vllm-version", "1.0"], "--vllm-version"),
    (["--vllm-override", "no_such_switch=1"], "--vllm-override"),
    (["--vllm-override", "free_order=stack"], "--vllm-override"),
    (["--vllm-override", "reserve_full_isl"], "--vllm-override"),
    (["--vllm-override", "watermark=lots"], "--vllm-override"),
    (["--scheduling-policy", "lifo"], "--scheduling-policy"),
    (["--long-prefill-token-threshold", "-1"], "--long-prefill-token-threshold"),
    (["--max-num-active-seqs", "8", "--vllm-version", "0.30"], "--vllm-version"),
    (["--max-num-active-seqs", "300"], "--max-num-active-seqs"),
    (["--max-num-active-seqs", "0"], "--max-num-active-seqs"),
])
def test_bad_release_options_exit_2_with_one_line(argv: list[str], option: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A refused value: exit status 2, one stderr line naming the option, no traceback."""
    with pytest.raises(SystemExit) as exc:
        main([*argv, *TINY])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and option in err and "Traceback" not in err


def test_every_minor_release_resolves() -> None:
    """0.14 ... 0.33 all parse; the default is the newest; patch releases are accepted."""
    assert VERSIONS == tuple(f"0.{m}" for m in range(14, 34))
    assert Options().vllm_version == "0.33"
    for version in VERSIONS:
        assert resolve_profile(version, ()).version == version
    assert resolve_profile("0.31.2", ()).version == "0.31"


def test_overrides_apply_in_order() -> None:
    """Repeated --vllm-override change single switches of the release's profile."""
    options = parse_options(["--vllm-version", "0.33", "--vllm-override", "free_order=append",
                             "--vllm-override", "watermark=0.05"])
    assert options.vllm_overrides == ("free_order=append", "watermark=0.05")
    profile = resolve(options).scheduler.vllm_profile
    assert profile == profile_for("0.33").replace(free_order="append", watermark=0.05)


@pytest.mark.parametrize("version, default", [("0.14", 0.9), ("0.19", 0.9), ("0.20", 0.92),
                                              ("0.33", 0.92)])
def test_gpu_memory_utilization_follows_the_release(version: str, default: float) -> None:
    """--gpu-memory-utilization unset: the release's default (0.92 from 0.20) sizes the pool;
    given, it wins."""
    profile = profile_for(version)
    assert gpu_memory_utilization(None, profile) == default
    assert gpu_memory_utilization(0.5, profile) == 0.5
    config = resolve(Options(vllm_version=version))
    assert config.capacity is not None
    assert config.capacity == resolve(Options(gpu_memory_utilization=default)).capacity


def test_swa_cap_term() -> None:
    """The sliding-window admission cap uses max_num_batched_tokens from 0.20, none before."""
    assert max_in_flight_tokens(profile_for("0.19"), 2048) is None
    assert max_in_flight_tokens(profile_for("0.33"), 2048) == 2048


def test_scheduler_config_refuses_active_seqs_before_031() -> None:
    """The frozen scheduler part checks the same rule as the command line."""
    with pytest.raises(OptionError, match="--vllm-version 0.31"):
        SchedulerConfig(max_num_active_seqs=4)
    assert SchedulerConfig(vllm_profile=profile_for("0.31"), max_num_active_seqs=4)


def test_profile_printed_and_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The resolved block names the release and its switches; config.json holds as_dict()."""
    argv = [*TINY, "--vllm-version", "0.19", "--vllm-override", "watermark=0.01",
            "--scheduling-policy", "priority", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "vLLM 0.19 profile: " in out and "reserve_full_isl=True" in out
    assert "watermark=0.01" in out and "scheduling policy priority" in out
    record = json.loads((tmp_path / "config.json").read_text())
    expected = profile_for("0.19").replace(watermark=0.01).as_dict()
    assert record["vllm_profile"] == expected
    assert record["scheduler"]["scheduling_policy"] == "priority"
    assert record["options"]["vllm_overrides"] == ["watermark=0.01"]


def test_describe_of_the_default_names_033() -> None:
    """Without options the configuration block shows the 0.33 profile."""
    config = resolve(Options(limit=3))
    trace, _ = load_input(config.workload, traces)
    assert "vLLM 0.33 profile: " in describe(config, trace)
