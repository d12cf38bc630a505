"""sim/config.py: options checked on construction, frozen parts, one source of defaults."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sim.cli import parse_options, resolve
from sim.config import CacheConfig, OptionError, Options, SchedulerConfig
from tests.unit.simkit import run_config


def test_options_defaults_are_the_command_lines() -> None:
    """An empty command line gives exactly the default Options."""
    assert parse_options([]) == Options()


@pytest.mark.parametrize("change, option, fragment", [
    ({"block_size": 0}, "block_size", "--block-size must be >= 1"),
    ({"limit": 0}, "limit", "--limit must be >= 1"),
    ({"jobs": 0}, "jobs", "--jobs must be >= 1"),
    ({"swap_space": -1.0}, "swap_space", "--swap-space must be >= 0"),
    ({"rate_scale": 0.0}, "rate_scale", "--rate-scale must be > 0"),
    ({"beam_keep_prob": 1.5}, "beam_keep_prob", "--beam-keep-prob must be in [0, 1]"),
    ({"placement": "best-fit"}, "placement", "--placement: invalid choice"),
    ({"sampling_mode": "both"}, "sampling_mode", "--sampling-mode: invalid choice"),
])
def test_each_option_is_checked_on_construction(change: dict[str, Any], option: str,
                                                fragment: str) -> None:
    """A bad value raises OptionError naming the option, also through replace()."""
    with pytest.raises(OptionError) as info:
        dataclasses.replace(Options(), **change)
    assert info.value.option == option and fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_resolved_parts_check_what_combines_options() -> None:
    """Rules between values: pool of two blocks, chunked-prefill budget, model context,
    swap space for swap preemption."""
    with pytest.raises(OptionError, match="--num-gpu-blocks must be >= 2"):
        CacheConfig(num_gpu_blocks=1)
    with pytest.raises(OptionError, match="without chunked prefill"):
        SchedulerConfig(max_model_len=4096, max_num_batched_tokens=2048, chunked_prefill=False)
    with pytest.raises(OptionError, match="context length"):
        run_config(max_model_len=8192)
    with pytest.raises(OptionError, match="--swap-space"):
        run_config(preemption="swap", num_cpu_blocks=0)
    assert run_config(preemption="swap", num_cpu_blocks=8).cache.num_cpu_blocks == 8


def test_configuration_is_frozen() -> None:
    """Parts cannot be changed after resolution (dataclasses.replace makes new ones)."""
    config = run_config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.cache.block_size = 8  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Options().tp = 2  # type: ignore[misc]


def test_replaced_options_resolve_as_the_command_line() -> None:
    """Options changed with replace() resolve to the command line's configuration, the
    computed pool size included (it depends on the block size)."""
    replaced = resolve(dataclasses.replace(Options(), block_size=32, rate_scale=2.0))
    parsed = resolve(parse_options(["--block-size", "32", "--rate-scale", "2"]))
    assert replaced == parsed
    assert replaced.cache.num_gpu_blocks != resolve(Options()).cache.num_gpu_blocks
    assert replaced.cache.num_gpu_blocks == parsed.capacity.num_gpu_blocks  # type: ignore[union-attr]
