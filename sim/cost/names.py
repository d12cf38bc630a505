"""Preset names as people write them: case, '-', '_' and spaces do not matter, and each
preset has aliases (HF ids, torch device names)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping


def norm_name(name: str) -> str:
    """``name`` lower-cased without '-', '_' and spaces."""
    return "".join(ch for ch in name.strip().lower() if ch not in "-_ ")


def alias_table(presets: Iterable[str], aliases: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """Normalised name or alias -> preset name, for every preset and its aliases."""
    return {norm_name(alias): name for name in presets
            for alias in (name, *aliases.get(name, ()))}
