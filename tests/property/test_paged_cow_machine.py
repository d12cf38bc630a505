"""Model-based test of fork, copy-on-write and swap in the paged manager.

The machine keeps the simulated contents of every GPU and CPU block slot and executes the
copy plans and swap maps the manager returns, the way kernels would. A slot's content is the
whole token prefix up to and including its token, so a wrong prefix hit, a missing copy, a
block reused while still live or a lost swap shows up as a sequence whose KV differs from
its own logical tokens. The machine runs under the 0.14 profile and again under 0.33's (free
order, null block and hash keys change; fork, copy-on-write and swap must still hold).
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from allocator.interface import ManagerConfig
from allocator.paged import PagedKVCacheManager
from allocator.profiles import profile_for
from allocator.request import Request

BLOCK_SIZE = 4
NUM_GPU_BLOCKS = 14
NUM_CPU_BLOCKS = 10
MAX_MODEL_LEN = 48
PREFIXES = ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 7], [8, 8, 8, 8, 8, 8, 8, 8, 8])
MAX_EXAMPLES = 2000 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 150


def content(tokens: list[int], position: int) -> tuple[int, ...]:
    """What slot ``position`` holds: the KV of a token depends on its whole prefix."""
    return tuple(tokens[: position + 1])


class PagedCowMachine(RuleBasedStateMachine):
    """Requests are admitted, decoded, forked, swapped and freed beside a slot-content model."""

    live = Bundle("live")
    VLLM_PROFILE = profile_for("0.14")

    def __init__(self) -> None:
        super().__init__()
        config = ManagerConfig(
            num_gpu_blocks=NUM_GPU_BLOCKS,
            block_size=BLOCK_SIZE,
            max_model_len=MAX_MODEL_LEN,
            num_cpu_blocks=NUM_CPU_BLOCKS,
            vllm_profile=self.VLLM_PROFILE,
        )
        self.manager = PagedKVCacheManager.from_config(config)
        self.gpu: dict[int, list[tuple[int, ...] | None]] = {}
        self.cpu: dict[int, list[tuple[int, ...] | None]] = {}
        self.requests: dict[str, Request] = {}
        self.swapped: set[str] = set()
        self.next_id = 0

    def _new_id(self) -> str:
        self.next_id += 1
        return f"r{self.next_id}"

    def _write(self, request: Request, start: int, end: int) -> None:
        """Execute the pending copy plan, then compute tokens [start, end) into their slots."""
        for src, dst in self.manager.take_copy_plan():
            self.gpu[dst] = list(self.gpu.get(src, [None] * BLOCK_SIZE))
        table = self.manager.get_block_ids(request.request_id)[0]
        tokens = request.all_token_ids
        for position in range(start, end):
            block = table[position // BLOCK_SIZE]
            slots = self.gpu.setdefault(block, [None] * BLOCK_SIZE)
            slots[position % BLOCK_SIZE] = content(tokens, position)
        request.num_computed_tokens = end

    @rule(target=live, prefix=st.sampled_from(PREFIXES), tail=st.lists(st.integers(1, 3), max_size=6))
    def admit(self, prefix: list[int], tail: list[int]) -> str:
        request = Request(
            self._new_id(), prefix + tail, max_tokens=32,
            block_hasher=self.manager.block_hasher, final_output_len=8,
        )
        blocks, num_hit = self.manager.get_computed_blocks(request)
        before = self.manager.memory_snapshot()
        result = self.manager.allocate_slots(request, request.num_tokens - num_hit, num_hit, blocks)
        if result is None:
            assert self.manager.memory_snapshot() == before
            return "rejected"
        self.requests[request.request_id] = request
        request.num_computed_tokens = num_hit
        self._write(request, num_hit, request.num_tokens)
        return request.request_id

    @precondition(lambda self: any(r not in self.swapped for r in self.requests))
    @rule(data=st.data(), token=st.integers(1, 3))
    def decode(self, data: st.DataObject, token: int) -> None:
        running = sorted(r for r in self.requests if r not in self.swapped)
        request = self.requests[data.draw(st.sampled_from(running))]
        if request.num_tokens >= MAX_MODEL_LEN:
            return
        request.append_output_token_ids(token)
        before = self.manager.memory_snapshot()
        if self.manager.allocate_slots(request, 1) is None:
            assert self.manager.memory_snapshot() == before
            self.manager.free(request)
            del self.requests[request.request_id]
            return
        self._write(request, request.num_computed_tokens, request.num_tokens)

    @precondition(lambda self: any(r not in self.swapped for r in self.requests))
    @rule(target=live, data=st.data())
    def fork(self, data: st.DataObject) -> str:
        running = sorted(r for r in self.requests if r not in self.swapped)
        parent = self.requests[data.draw(st.sampled_from(running))]
        child = Request(
            self._new_id(), parent.prompt_token_ids, max_tokens=32,
            block_hasher=self.manager.block_hasher, final_output_len=8,
        )
        if parent.output_token_ids:
            child.append_output_token_ids(list(parent.output_token_ids))
        self.manager.fork(parent, child)
        assert child.num_computed_tokens == parent.num_computed_tokens
        self.requests[child.request_id] = child
        return child.request_id

    @precondition(lambda self: any(r not in self.swapped for r in self.requests))
    @rule(data=st.data())
    def swap_out(self, data: st.DataObject) -> None:
        running = sorted(r for r in self.requests if r not in self.swapped)
        request = self.requests[data.draw(st.sampled_from(running))]
        if not self.manager.can_swap_out(request):
            return
        for gpu, cpu in self.manager.swap_out(request):
            self.cpu[cpu] = list(self.gpu[gpu])
        self.swapped.add(request.request_id)

    @precondition(lambda self: bool(self.swapped))
    @rule(data=st.data())
    def swap_in(self, data: st.DataObject) -> None:
        request = self.requests[data.draw(st.sampled_from(sorted(self.swapped)))]
        if not self.manager.can_swap_in(request):
            return
        for cpu, gpu in self.manager.swap_in(request):
            self.gpu[gpu] = list(self.cpu[cpu])
        self.swapped.discard(request.request_id)

    @rule(request_id=consumes(live))
    def free(self, request_id: str) -> None:
        request = self.requests.pop(request_id, None)
        if request is not None:
            self.manager.free(request)
            self.swapped.discard(request_id)

    @invariant()
    def every_sequence_reads_its_own_tokens(self) -> None:
        self.manager.check_invariants()
        cpu_tables = self.manager.swap_space.cpu_tables
        for request_id, request in self.requests.items():
            if request_id in self.swapped:
                table, memory = cpu_tables[request_id], self.cpu
            else:
                table, memory = self.manager.get_block_ids(request_id)[0], self.gpu
            tokens = request.all_token_ids
            for position in range(request.num_computed_tokens):
                block = table[position // BLOCK_SIZE]
                got = memory[block][position % BLOCK_SIZE]
                assert got == content(tokens, position), (request_id, position, block)

    @invariant()
    def ref_counts_equal_holders(self) -> None:
        holders = [0] * NUM_GPU_BLOCKS
        for request_id in self.requests:
            if request_id not in self.swapped:
                for block in self.manager.get_block_ids(request_id)[0]:
                    holders[block] += 1
        for block in self.manager.block_pool.blocks[1:]:
            assert block.ref_cnt == holders[block.block_id]

    def teardown(self) -> None:
        for request in self.requests.values():
            self.manager.free(request)
        pool = self.manager.block_pool
        assert pool.get_num_free_blocks() == NUM_GPU_BLOCKS - 1
        assert len(self.manager.swap_space.free_cpu_blocks) == NUM_CPU_BLOCKS
        self.manager.check_invariants()


SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
PagedCowMachine.TestCase.settings = SETTINGS
TestPagedCowMachine = PagedCowMachine.TestCase


class PagedCowMachine033(PagedCowMachine):
    """The same machine under the vLLM 0.33 profile."""

    VLLM_PROFILE = profile_for("0.33")


PagedCowMachine033.TestCase.settings = settings(SETTINGS, max_examples=MAX_EXAMPLES // 3)
TestPagedCowMachine033 = PagedCowMachine033.TestCase
