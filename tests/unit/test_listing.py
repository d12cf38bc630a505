"""sim/listing.py: ``simulate.py --list`` prints every preset with its key numbers, exit 0."""
from __future__ import annotations

import pytest

from allocator.registry import BUILTIN_NAMES
from sim.cli import main
from sim.cost.gpus import PRESETS as GPUS
from sim.cost.models import PRESETS as MODELS
from traces.loader import FORMATS


@pytest.mark.parametrize("kind, names", [
    ("models", list(MODELS)), ("gpus", list(GPUS)), ("formats", list(FORMATS)),
    ("allocators", list(BUILTIN_NAMES)),
])
def test_list_prints_every_preset_and_exits_0(kind: str, names: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--list", kind])
    assert exc.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(names) + 1
    for name, line in zip(names, lines[1:]):
        assert line.startswith(f"  {name}: ")


def test_key_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-2-7B: 32 layers, 32 KV heads x 128 x 2 (K, V) x 2 bytes x 32 layers per token;
    the A100-80GB's datasheet numbers; Mooncake detected by hash_ids."""
    for kind in ("models", "gpus", "formats"):
        with pytest.raises(SystemExit):
            main(["--list", kind])
    out = capsys.readouterr().out
    assert "Llama-2-7B: 32 layers, 32 / 32 x 128, fp16" in out
    assert f"{2 * 32 * 128 * 2 * 32:,} KV bytes/token" in out
    assert "A100-80GB: 80 GiB, 2039 GB/s HBM, 312 TFLOP/s" in out
    assert "mooncake: JSONL whose records have hash_ids" in out
