"""Conformance of every KVManager to the protocol, driven by random admit/extend/free streams.

A Hypothesis state machine plays a tiny vLLM-like scheduler against one manager and a model
of the live requests, checking after every operation: ``check_invariants``; the snapshot's
capacity and category sum; ``logical_slots`` equal to the computed tokens of live requests;
that an ``allocate_slots`` returning None changes neither the snapshot nor the request's
block ids; that freed requests hold nothing; and that freeing everything leaves all slots
free. It runs over every built-in name that imports now (``available_managers``) and, to
test your own manager, any ``module:Class`` (comma-separated) in the environment variable
PAGEDSIM_CONFORMANCE_MANAGER, e.g.
``PAGEDSIM_CONFORMANCE_MANAGER=my.pkg:MyManager pytest tests/property/test_manager_conformance.py``.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from allocator.hashing import get_request_block_hasher, sha256
from allocator.interface import KVManager, ManagerConfig, MemorySnapshot
from allocator.registry import CONTIGUOUS_POLICIES, available_managers, make_manager
from allocator.request import Request
from allocator.waste import true_output_len

BLOCK_SIZE = 4
MAX_MODEL_LEN = 32
PLUGIN_ENV = "PAGEDSIM_CONFORMANCE_MANAGER"


def manager_cases() -> list[tuple[str, str]]:
    """(spec, placement) pairs: both placements for max/pow2/oracle, plug-ins from the env.

    "ft" is the Max manager under another name (its batching lives in the simulator), so it
    runs with one placement only.
    """
    cases = []
    for name in available_managers():
        both = name in CONTIGUOUS_POLICIES and name != "ft"
        placements = ("buddy", "first-fit") if both else ("buddy",)
        cases += [(name, placement) for placement in placements]
    plugins = os.environ.get(PLUGIN_ENV, "")
    cases += [(spec.strip(), "buddy") for spec in plugins.split(",") if spec.strip()]
    return cases


class ConformanceMachine(RuleBasedStateMachine):
    """One manager beside a model: live requests, their progress and their true lengths."""

    spec = "max"
    placement = "buddy"

    def __init__(self) -> None:
        super().__init__()
        # 19 usable blocks of 4 = 76 slots: not a power of two, so buddy uses 64 + 8 + 4.
        self.config = ManagerConfig(
            num_gpu_blocks=20, block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN,
            placement=self.placement,
        )
        self.manager: KVManager = make_manager(self.spec, self.config)
        self.hasher = get_request_block_hasher(BLOCK_SIZE, sha256)
        self.live: dict[str, Request] = {}
        self.gone: list[str] = []
        self.next_id = 0

    @rule(
        prompt=st.lists(st.integers(0, 2), min_size=1, max_size=24),
        output_len=st.integers(0, 12),
        chunk=st.integers(1, 24),
    )
    def admit(self, prompt: list[int], output_len: int, chunk: int) -> None:
        request = Request(
            f"r{self.next_id}", prompt, max_tokens=MAX_MODEL_LEN, block_hasher=self.hasher,
            final_output_len=output_len,
        )
        self.next_id += 1
        blocks, num_hit = self.manager.get_computed_blocks(request)
        assert 0 <= num_hit < request.num_tokens
        num_new = min(request.num_tokens - num_hit, chunk)
        if self._allocate_or_check_unchanged(request, num_new, num_hit, blocks):
            request.num_computed_tokens = num_hit + num_new
            self.live[request.request_id] = request
            self._after_compute(request)

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 1 << 16), chunk=st.integers(1, 24))
    def extend(self, pick: int, chunk: int) -> None:
        request = self._pick(pick)
        num_new = min(request.num_tokens - request.num_computed_tokens, chunk)
        if self._allocate_or_check_unchanged(request, num_new):
            request.num_computed_tokens += num_new
            self._after_compute(request)
        else:
            self._free(request)  # preemption by recomputation, as vLLM v1

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 1 << 16))
    def abort(self, pick: int) -> None:
        self._free(self._pick(pick))

    @invariant()
    def conforms(self) -> None:
        self.manager.check_invariants()
        snapshot = self.manager.memory_snapshot()
        assert isinstance(snapshot, MemorySnapshot)
        assert snapshot.capacity == self.config.capacity_slots
        computed = sum(r.num_computed_tokens for r in self.live.values())
        assert snapshot.logical_slots == computed
        assert snapshot.token_states <= computed
        for request_id in self.live:
            assert any(self.manager.get_block_ids(request_id)), f"{request_id} holds nothing"
        for request_id in self.gone[-5:]:
            assert not any(self.manager.get_block_ids(request_id)), f"{request_id} leaked"

    def teardown(self) -> None:
        for request in list(self.live.values()):
            self._free(request)
        self.manager.check_invariants()
        snapshot = self.manager.memory_snapshot()
        assert snapshot.token_states == snapshot.reserved == snapshot.internal_frag == 0
        assert snapshot.external_frag == 0 and snapshot.logical_slots == 0
        assert snapshot.free + snapshot.cached_evictable == snapshot.capacity

    def _allocate_or_check_unchanged(
        self, request: Request, num_new: int, num_hit: int = 0, blocks: object = None
    ) -> bool:
        before = self.manager.memory_snapshot()
        ids_before = self.manager.get_block_ids(request.request_id)
        result = self.manager.allocate_slots(request, num_new, num_hit, blocks)
        if result is not None:
            return True
        assert self.manager.memory_snapshot() == before, "failed allocate_slots changed memory"
        assert self.manager.get_block_ids(request.request_id) == ids_before
        return False

    def _after_compute(self, request: Request) -> None:
        """Sample a token once every token is computed; finish at the true output length."""
        if request.num_computed_tokens < request.num_tokens:
            return
        request.append_output_token_ids(request.num_output_tokens % 3)
        if request.num_output_tokens >= max(true_output_len(request, MAX_MODEL_LEN), 1):
            self._free(request)

    def _pick(self, pick: int) -> Request:
        ids = sorted(self.live)
        return self.live[ids[pick % len(ids)]]

    def _free(self, request: Request) -> None:
        self.manager.free(request)
        request.num_computed_tokens = 0
        del self.live[request.request_id]
        self.gone.append(request.request_id)


@pytest.mark.parametrize(("spec", "placement"), manager_cases())
def test_manager_conforms(spec: str, placement: str) -> None:
    """Random admit/extend/abort streams keep the manager consistent with the protocol."""
    machine: type[ConformanceMachine] = type(
        "ConformanceMachineFor", (ConformanceMachine,), {"spec": spec, "placement": placement}
    )
    test_case = machine.TestCase
    test_case.settings = settings(
        max_examples=20, stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    test_case().runTest()
