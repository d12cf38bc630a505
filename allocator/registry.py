"""Build a KV-cache manager from a name on the command line (``--allocators paged,pow2,...``).

Built-in names: "paged" and "paged-nocache" (vLLM paging with and without prefix caching),
"max", "pow2" and "oracle" (contiguous reservations, ``allocator/reservation.py``) and "ft"
(FasterTransformer: Max reservation; its request-level batching is the simulator's job).
Any other spec of the form "package.module:Class" is a plug-in, imported by path and built
with ``Class.from_config(config)``; the conformance tests can be pointed at one too.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from allocator.interface import KVManager, ManagerConfig

PAGED_TARGET = "allocator.paged:PagedKVCacheManager"
CONTIGUOUS_TARGET = "allocator.contiguous:ContiguousManager"
CONTIGUOUS_POLICIES = {"max": "max", "pow2": "pow2", "oracle": "oracle", "ft": "max"}
BUILTIN_NAMES = ("paged", "paged-nocache", *CONTIGUOUS_POLICIES)


def make_manager(spec: str, config: ManagerConfig) -> KVManager:
    """Build the manager named by ``spec`` for ``config``.

    Args:
        spec: a built-in name (``BUILTIN_NAMES``) or "package.module:Class".
        config: pool size, block size, placement and the rest.

    Raises:
        ValueError: unknown name, unimportable plug-in, a class without ``from_config``,
            a failing ``from_config``, or a result missing ``KVManager`` methods. The message
            names the spec.
    """
    spec = spec.strip()
    if spec in CONTIGUOUS_POLICIES:
        cls = load_class(CONTIGUOUS_TARGET, spec)
        return _build(spec, cls, config, policy=CONTIGUOUS_POLICIES[spec])
    if spec == "paged":
        return _build(spec, load_class(PAGED_TARGET, spec), config)
    if spec == "paged-nocache":
        nocache = dataclasses.replace(config, enable_caching=False)
        return _build(spec, load_class(PAGED_TARGET, spec), nocache)
    if ":" in spec:
        return _build(spec, load_class(spec, spec), config)
    known = ", ".join(BUILTIN_NAMES)
    raise ValueError(f"unknown manager {spec!r}: expected one of {known}, or module:Class")


def available_managers() -> list[str]:
    """The built-in names whose implementation can be imported now."""
    names = []
    for name in BUILTIN_NAMES:
        target = CONTIGUOUS_TARGET if name in CONTIGUOUS_POLICIES else PAGED_TARGET
        try:
            load_class(target, name)
        except ValueError:
            continue
        names.append(name)
    return names


def load_class(target: str, spec: str) -> Any:
    """Import ``"package.module:Class"`` and return the class; errors name ``spec``."""
    module_name, sep, class_name = target.partition(":")
    if not sep or not module_name or not class_name:
        raise ValueError(f"manager {spec!r}: expected module:Class, got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"manager {spec!r}: cannot import {module_name!r} ({exc})") from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"manager {spec!r}: module {module_name!r} has no {class_name!r}")
    if getattr(cls, "from_config", None) is None:
        raise ValueError(f"manager {spec!r}: {target} has no from_config(config) classmethod")
    return cls


def _build(spec: str, cls: Any, config: ManagerConfig, **kwargs: Any) -> KVManager:
    try:
        manager = cls.from_config(config, **kwargs)
    except Exception as exc:
        raise ValueError(f"manager {spec!r}: from_config failed: {exc}") from exc
    missing = [name for name in _protocol_members() if not hasattr(manager, name)]
    if missing:
        raise ValueError(f"manager {spec!r}: not a KVManager, missing {', '.join(missing)}")
    built: KVManager = manager
    return built


def _protocol_members() -> list[str]:
    members = set(KVManager.__annotations__)
    members.update(
        name for name, value in vars(KVManager).items()
        if callable(value) and not name.startswith("_")
    )
    return sorted(members | {"from_config"})
