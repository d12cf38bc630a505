"""The allocation log: header and per-step records whose slot mappings follow the tables."""
from __future__ import annotations

from pathlib import Path

from kernels.execute.arch import Architecture
from sim.cli import main
from sim.cost.models import get_model
from sim.results.alloc_log import read_log


def test_log_records_tables_slots_and_copies(tmp_path: Path) -> None:
    """cow n=2 on a small pool: every new token's slot is in its block table; copies logged."""
    assert main(["--limit", "6", "--n", "2", "--allocators", "paged", "--num-gpu-blocks",
                 "200", "--out", str(tmp_path), "--no-progress",
                 "--record-allocation-log"]) == 0
    lines = read_log(tmp_path / "allocation_log.jsonl.gz")
    header, steps = lines[0], lines[1:]
    assert header["kind"] == "header" and header["block_size"] == 16
    assert header["model"]["num_kv_heads"] == 32 and header["num_gpu_blocks"] == 200
    bs = header["block_size"]
    seen_tokens = 0
    for step in steps:
        assert step["kind"] == "step" and step["attention_s"] >= 0
        for seq in step["seqs"]:
            first, end = seq["positions"]
            assert len(seq["token_ids"]) == len(seq["slot_mapping"]) == end - first
            for pos, slot in zip(range(first, end), seq["slot_mapping"]):
                assert slot // bs == seq["block_table"][pos // bs] and slot % bs == pos % bs
            seen_tokens += end - first
    assert seen_tokens > 0
    assert sum(len(s["copies"]) for s in steps) > 0
    assert sum(len(s["frees"]) for s in steps) == 12


def test_header_carries_the_architecture_the_executor_reads(tmp_path: Path) -> None:
    """The header's model section rebuilds the preset's Architecture in kernels/execute."""
    assert main(["--limit", "2", "--allocators", "paged", "--num-gpu-blocks", "100",
                 "--model", "Qwen3-30B-A3B", "--out", str(tmp_path), "--no-progress",
                 "--record-allocation-log"]) == 0
    header = read_log(tmp_path / "allocation_log.jsonl.gz")[0]
    arch = Architecture.from_header(header["model"], "log:1")
    want = get_model("Qwen3-30B-A3B")
    assert (arch.hidden_size, arch.intermediate_size, arch.vocab_size) == (2048, 6144, 151936)
    assert arch.qk_norm and not arch.qkv_bias and arch.rope_theta == want.rope_theta
    assert (arch.num_experts, arch.num_experts_per_tok, arch.moe_intermediate_size) == (128, 8,
                                                                                       768)
    assert arch.dtype == "bfloat16" and arch.rms_norm_eps == want.rms_norm_eps
