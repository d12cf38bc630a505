"""Unit tests for make_manager: built-in names, plug-ins by import path, and clear errors."""
from __future__ import annotations

import pytest

from allocator import registry
from allocator.contiguous import ContiguousManager
from allocator.interface import KVManager, ManagerConfig
from allocator.registry import BUILTIN_NAMES, available_managers, make_manager

CONFIG = ManagerConfig(num_gpu_blocks=9, block_size=4, max_model_len=16)
HERE = __name__


class NoFromConfig:
    """A class that cannot be built from a config."""


class FailingFromConfig:
    """A class whose from_config raises."""

    @classmethod
    def from_config(cls, config: ManagerConfig) -> FailingFromConfig:
        raise RuntimeError("pool too small")


class NotAManager:
    """from_config works but the result lacks the KVManager methods."""

    @classmethod
    def from_config(cls, config: ManagerConfig) -> NotAManager:
        return cls()


class RecordingManager(ContiguousManager):
    """A plug-in that remembers the config it was built from."""

    seen: ManagerConfig | None = None

    @classmethod
    def from_config(cls, config: ManagerConfig, policy: str = "max") -> RecordingManager:
        manager = cls(config.capacity_slots, config.max_model_len, config.block_size, policy)
        manager.seen = config
        return manager


@pytest.mark.parametrize(
    ("name", "policy"), [("max", "max"), ("pow2", "pow2"), ("oracle", "oracle"), ("ft", "max")]
)
def test_contiguous_names(name: str, policy: str) -> None:
    """Each contiguous name builds a ContiguousManager with its reservation policy."""
    manager = make_manager(name, CONFIG)
    assert isinstance(manager, ContiguousManager) and isinstance(manager, KVManager)
    assert manager.policy_name == policy
    assert manager.memory_snapshot().capacity == CONFIG.capacity_slots


def test_available_managers_lists_what_imports() -> None:
    """Every contiguous name is available, and only built-in names are listed."""
    names = available_managers()
    assert {"max", "pow2", "oracle", "ft"} <= set(names) <= set(BUILTIN_NAMES)


def test_paged_names_build_or_say_why_not() -> None:
    """'paged' builds when allocator.paged exists, else fails naming the spec and module."""
    for name in ("paged", "paged-nocache"):
        if name in available_managers():
            assert isinstance(make_manager(name, CONFIG), KVManager)
        else:
            with pytest.raises(ValueError, match=f"'{name}'.*allocator.paged"):
                make_manager(name, CONFIG)


def test_paged_nocache_turns_caching_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """'paged-nocache' builds the paged class with enable_caching=False."""
    monkeypatch.setattr(registry, "PAGED_TARGET", f"{HERE}:RecordingManager")
    cached = make_manager("paged", CONFIG)
    uncached = make_manager("paged-nocache", CONFIG)
    assert isinstance(cached, RecordingManager) and isinstance(uncached, RecordingManager)
    assert cached.seen == CONFIG
    assert uncached.seen is not None and not uncached.seen.enable_caching


def test_plugin_by_import_path() -> None:
    """'module:Class' imports the class and calls from_config(config)."""
    manager = make_manager(f" {HERE}:RecordingManager ", CONFIG)
    assert isinstance(manager, RecordingManager) and manager.seen == CONFIG


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lru", "unknown manager 'lru'"),
        ("no.such.module:X", "cannot import 'no.such.module'"),
        (f"{HERE}:Missing", "has no 'Missing'"),
        (f"{HERE}:NoFromConfig", "no from_config"),
        (f"{HERE}:FailingFromConfig", "from_config failed: pool too small"),
        (f"{HERE}:NotAManager", "not a KVManager, missing allocate_slots"),
        (":Class", "expected module:Class"),
    ],
)
def test_bad_specs_raise_value_error_naming_the_spec(spec: str, message: str) -> None:
    """Every failure is a ValueError whose message names the spec and the reason."""
    with pytest.raises(ValueError) as info:
        make_manager(spec, CONFIG)
    text = str(info.value)
    assert repr(spec.strip()) in text and message in text
