"""simulate.py --validate end to end: a tiny model and trace, replayed on the CPU kernels."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from simulate import main as simulate_main

TINY_MODEL = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
              "intermediate_size": 128, "vocab_size": 32000, "max_position_embeddings": 4096,
              "torch_dtype": "float16"}


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    rng = random.Random(3)
    system = [rng.randrange(32000) for _ in range(20)]
    trace = tmp_path / "trace.jsonl"
    with trace.open("w") as fh:
        for i in range(5):
            own = [rng.randrange(32000) for _ in range(rng.randrange(4, 20))]
            fh.write(json.dumps({"request_id": f"r{i}", "arrival_s": 0.0,
                                 "prompt_len": len(system) + len(own),
                                 "output_len": rng.randrange(6, 14),
                                 "prompt_token_ids": system + own}) + "\n")
    model = tmp_path / "config.json"
    model.write_text(json.dumps(TINY_MODEL))
    return trace, model


def test_simulate_validate_passes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The recorded log of a tight pool (copies, hits, preemptions) validates on the kernels
    (on the CPU: the shrunk layer, every step replayed)."""
    trace, model = _inputs(tmp_path)
    out = tmp_path / "out"
    # --swap-space 0.001 (GiB) is about a thousand CPU blocks of this model; the default 4 GiB
    # is four million, each allocated and filled by the replay. The plain roofline step model
    # is not fitted at start as the default calibrated one is.
    code = simulate_main([str(trace), "--model", str(model), "--allocators", "paged",
                          "--num-gpu-blocks", "14", "--block-size", "8", "--no-progress",
                          "--out", str(out), "--validate", "--n", "2", "--sampling-mode", "cow",
                          "--preemption", "swap", "--swap-space", "0.001",
                          "--step-model", "roofline"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "validate paged: " in text and "PASS" in text
    with gzip.open(out / "allocation_log.jsonl.gz", "rt") as fh:
        steps = [json.loads(line) for line in fh][1:]
    # without CUDA, the CPU path compares the first 20 steps and every step with an event
    cuda = pytest.importorskip("torch").cuda.is_available()
    assert ("validate: no CUDA device" in text) == (not cuda)
    assert f"steps: {len(steps)} replayed, " in text
    for event in ("copies", "prefix_hits", "swap_out", "swap_in"):
        assert any(step[event] for step in steps), event
