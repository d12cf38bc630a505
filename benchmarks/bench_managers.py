"""The allocator benchmark's op stream through the manager interface, for every manager.

``bench_allocator.py --managers`` runs the same seeded stream as the paged benchmark through
``allocator.registry.make_manager``: the paged manager, the contiguous baselines (Max, Pow2,
Oracle) with buddy and first-fit placement, and a fork workload in which every admitted
request is forked into ``n`` samples that decode different tokens (so the paged manager
copies each shared partial block once per writer and contiguous managers give each sample a
region of its own). A step that cannot grow a sequence preempts the newest running one.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from allocator.interface import KVManager, ManagerConfig
from allocator.registry import make_manager
from allocator.request import Request

MAX_RUNNING = 128


@dataclass(frozen=True, slots=True)
class ManagerResult:
    """One manager's run of the stream."""

    name: str
    token_steps: int
    seconds: float
    preemptions: int
    copies: int

    @property
    def rate(self) -> float:
        return self.token_steps / self.seconds


def _new_request(manager: KVManager, request_id: str, prompt: list[int], output: int) -> Request:
    hasher = getattr(manager, "block_hasher", None)
    return Request(request_id, prompt, max_tokens=output, block_hasher=hasher,
                   final_output_len=output)


def _admit(manager: KVManager, request: Request, n: int) -> list[Request] | None:
    """Prefix lookup + allocation, then ``n - 1`` forks; None if the manager is full."""
    hit_blocks, num_hit = manager.get_computed_blocks(request)
    if manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, hit_blocks) is None:
        return None
    request.num_computed_tokens = request.num_tokens
    group = [request]
    for k in range(1, n):
        child = _new_request(manager, f"{request.request_id}/{k}", request.prompt_token_ids,
                             request.max_tokens)
        if not manager.can_fork(request, child):
            break
        manager.fork(request, child)
        group.append(child)
    return group


def run_manager_stream(spec: str, config: ManagerConfig, prompts: list[list[int]],
                       outputs: list[int], n: int = 1) -> ManagerResult:
    """Run the stream through ``spec`` (a registry name) and time it."""
    manager = make_manager(spec, config)
    waiting = deque(range(len(prompts)))
    running: list[Request] = []
    token_steps = preemptions = copies = 0
    start = time.perf_counter()
    while waiting or running:
        while waiting and len(running) < MAX_RUNNING:
            i = waiting[0]
            group = _admit(manager, _new_request(manager, str(i), prompts[i], outputs[i]), n)
            if group is None:
                break
            waiting.popleft()
            running.extend(group)
        still_running = []
        for index, request in enumerate(running):
            if request.num_computed_tokens == 0:
                continue  # preempted earlier in this step
            request.append_output_token_ids(1 + index % 7)
            if manager.allocate_slots(request, 1) is None:
                manager.free(request)
                request.num_computed_tokens = 0
                preemptions += 1
                continue
            token_steps += 1
            request.num_computed_tokens += 1
            if request.num_output_tokens >= request.max_tokens:
                manager.free(request)
            else:
                still_running.append(request)
        copies += len(manager.take_copy_plan())
        running = still_running
    seconds = time.perf_counter() - start
    manager.check_invariants()
    snapshot = manager.memory_snapshot()
    if snapshot.token_states + snapshot.reserved + snapshot.internal_frag:
        raise AssertionError(f"{spec}: slots still held after every request was freed")
    return ManagerResult(spec, token_steps, seconds, preemptions, copies)


def run_all(prompts: list[list[int]], outputs: list[int], num_blocks: int, block_size: int,
            max_model_len: int, n: int) -> list[ManagerResult]:
    """Every built-in manager (contiguous ones with both placements) on the stream."""
    results = []
    for spec, placement in (("paged", "buddy"), ("paged-nocache", "buddy"),
                            ("max", "buddy"), ("max", "first-fit"), ("pow2", "buddy"),
                            ("pow2", "first-fit"), ("oracle", "buddy"),
                            ("oracle", "first-fit")):
        config = ManagerConfig(num_gpu_blocks=num_blocks, block_size=block_size,
                               max_model_len=max_model_len, placement=placement)
        result = run_manager_stream(spec, config, prompts, outputs, n)
        results.append(ManagerResult(f"{spec} ({placement})" if spec not in (
            "paged", "paged-nocache") else spec, result.token_steps, result.seconds,
            result.preemptions, result.copies))
    return results
