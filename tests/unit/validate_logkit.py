"""Tiny allocation logs for the validator tests, made by driving the real paged allocator.

`LogKit` scripts a scenario step by step (admit with prefix hits, decode, fork with
copy-on-write, swap out and in, preempt by recompute, finish) against
`allocator.paged.PagedKVCacheManager` and writes each step in the allocation-log format of
`sim/results/results_schema.json`, without the simulator (so it also runs where simpy is missing).
`scenario_log` is the standard scenario that touches every event kind. The header's `model`
section carries the whole architecture the executor needs (a tiny dense model by default;
`arch` overrides or adds fields, e.g. the MoE ones).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from allocator.interface import ManagerConfig
from allocator.paged import PagedKVCacheManager
from allocator.request import Request


def tiny_architecture(hidden_size: int) -> dict[str, Any]:
    """The architecture fields of a tiny dense Llama-style model (the executor's header)."""
    return {"hidden_size": hidden_size, "intermediate_size": 2 * hidden_size,
            "vocab_size": 1024, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
            "gated_mlp": True, "qkv_bias": False, "qk_norm": False, "num_experts": 0}


class LogKit:
    """One paged allocator section; call `step(...)` per step, then `write(path)`."""

    def __init__(self, num_blocks: int = 40, block_size: int = 4, num_cpu_blocks: int = 16,
                 heads: tuple[int, int, int] = (2, 1, 16), dtype: str = "fp32",
                 window: int | None = None, hit_token_ids: bool = True,
                 arch: dict[str, Any] | None = None, num_layers: int = 2) -> None:
        self.bs = block_size
        self.mgr = PagedKVCacheManager.from_config(ManagerConfig(
            num_gpu_blocks=num_blocks, block_size=block_size, max_model_len=512,
            num_cpu_blocks=num_cpu_blocks, sliding_window=window, hash_algo="fast"))
        self.reqs: dict[str, Request] = {}
        self.admitted: set[str] = set()
        self.hit_token_ids = hit_token_ids
        self.lines: list[dict[str, Any]] = [{
            "kind": "header", "schema_version": 1, "allocator": "paged",
            "block_size": block_size, "num_gpu_blocks": num_blocks,
            "num_cpu_blocks": num_cpu_blocks,
            "model": {"name": "tiny", "num_layers": num_layers, "num_heads": heads[0],
                      "num_kv_heads": heads[1], "head_dim": heads[2], "dtype": dtype,
                      "kv_cache_dtype": "auto", "sliding_window": window,
                      **tiny_architecture(heads[0] * heads[2]), **(arch or {})},
            "seed": 7, "token_ids": "test"}]
        self.next_token = 1000

    def add(self, rid: str, prompt: list[int]) -> None:
        self.reqs[rid] = Request(rid, prompt, 64, block_hasher=self.mgr.block_hasher)

    def _sample(self, req: Request) -> None:
        self.next_token += 7
        req.append_output_token_ids(self.next_token % 997)

    def _schedule(self, rid: str, n: int | None, ev: dict[str, Any]) -> dict[str, Any]:
        req = self.reqs[rid]
        if rid not in self.admitted:
            blocks, hit = self.mgr.get_computed_blocks(req)
            n = req.num_tokens - hit if n is None else n
            assert self.mgr.allocate_slots(req, n, hit, blocks) is not None
            req.num_computed_tokens = hit
            self.admitted.add(rid)
            if hit:
                hit_rec = {"request_id": rid, "sample": 0, "num_tokens": hit,
                           "block_ids": list(blocks.get_block_ids()[0])}
                if self.hit_token_ids:
                    hit_rec["token_ids"] = list(req.all_token_ids[:hit])
                ev["prefix_hits"].append(hit_rec)
        else:
            n = req.num_tokens - req.num_computed_tokens if n is None else n
            assert self.mgr.allocate_slots(req, n) is not None
        c = req.num_computed_tokens
        table = list(self.mgr.get_block_ids(rid)[0])
        return {"request_id": rid, "sample": 0, "positions": [c, c + n],
                "token_ids": list(req.all_token_ids[c:c + n]), "context_len": c + n,
                "block_table": table,
                "slot_mapping": [table[p // self.bs] * self.bs + p % self.bs
                                 for p in range(c, c + n)]}

    def step(self, run: dict[str, int | None], *, preempt: tuple[str, ...] = (),
             swap_out: tuple[str, ...] = (), swap_in: tuple[str, ...] = (),
             forks: tuple[tuple[str, str], ...] = (), finish: tuple[str, ...] = ()) -> None:
        """One step: preemptions and swaps, then `run` (rid -> new tokens, None = all)."""
        ev: dict[str, Any] = {k: [] for k in ("copies", "swap_out", "swap_in", "frees",
                                              "prefix_hits", "forks")}
        for rid in preempt:
            ev["frees"].append(self._free(rid, "preempted"))
            self.reqs[rid].num_computed_tokens = 0
        for rid in swap_out:
            ev["swap_out"].append({"request_id": rid, "map": self.mgr.swap_out(self.reqs[rid])})
        for rid in swap_in:
            ev["swap_in"].append({"request_id": rid, "map": self.mgr.swap_in(self.reqs[rid])})
        seqs = [self._schedule(rid, n, ev) for rid, n in run.items()]
        ev["copies"] = [list(p) for p in self.mgr.take_copy_plan()]
        for seq in seqs:
            self.reqs[seq["request_id"]].num_computed_tokens = seq["positions"][1]
        for parent, child in forks:
            self._fork(parent, child, ev)
        for rid in [*run, *(c for _, c in forks)]:
            req = self.reqs[rid]
            if req.num_computed_tokens == req.num_tokens:
                self._sample(req)
        for rid in finish:
            ev["frees"].append(self._free(rid, "finished"))
        self.lines.append({"kind": "step", "step": len(self.lines) - 1, "time_s": 0.0,
                           "attention_s": 1e-4, "seqs": seqs,
                           "preemptions": len(preempt) + len(swap_out), **ev})

    def _fork(self, parent: str, child: str, ev: dict[str, Any]) -> None:
        """The child shares every token the parent has computed; both then sample."""
        p = self.reqs[parent]
        c = Request(child, p.prompt_token_ids, 64, block_hasher=self.mgr.block_hasher)
        if p.output_token_ids:
            c.append_output_token_ids(list(p.output_token_ids))
        self.mgr.fork(p, c)
        self.reqs[child] = c
        self.admitted.add(child)
        ev["forks"].append({"parent": parent, "child": child})

    def _free(self, rid: str, reason: str) -> dict[str, Any]:
        rec = {"request_id": rid, "sample": 0, "reason": reason,
               "block_ids": list(self.mgr.get_block_ids(rid)[0])}
        self.mgr.free(self.reqs[rid])
        self.admitted.discard(rid)
        return rec

    def write(self, path: Path) -> Path:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            for line in self.lines:
                fh.write(json.dumps(line) + "\n")
        return path


def scenario_log(path: Path, **kwargs: Any) -> Path:
    """Prefix hits, chunked prefill, fork + COW, swap out/in, recompute preemption, finish.

    Lengths scale with the block size, so that b hits a's two full blocks and the block b
    and b/1 share after the fork is partial.
    """
    kit = LogKit(**kwargs)
    bs = kit.bs
    shared = list(range(11, 12 + 2 * bs))
    kit.add("a", shared + [21, 22, 23])
    kit.step({"a": 2 * bs})                             # chunked prefill
    kit.step({"a": None})                               # rest of the prompt, samples
    kit.add("b", shared + [31, 32, 33, 34, 35])
    kit.step({"a": 1, "b": None})                       # b hits a's two full blocks
    kit.step({"a": 1, "b": 1}, forks=(("b", "b/1"),))   # b forks after its first decode
    kit.step({"a": 1, "b": 1, "b/1": 1})                # COW copy of the shared last block
    kit.step({"b": 1, "b/1": 1}, swap_out=("a",))
    kit.step({"b": 1, "b/1": 1})
    kit.step({"a": 1}, swap_in=("a",), preempt=("b/1",))
    kit.step({"a": 1, "b": 1, "b/1": None})             # b/1 re-admitted with a prefix hit
    kit.step({"a": 1, "b": 1, "b/1": 1}, finish=("a",))
    kit.step({"b": 1, "b/1": 1}, finish=("b", "b/1"))
    return kit.write(path)
