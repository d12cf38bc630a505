"""Model-based test of the paged allocator (KVCacheManager) with Hypothesis.

Requests whose prompts share prefixes over a 3-token alphabet are admitted (prefix lookup, then
a possibly chunked prefill), extended, preempted, resumed and freed on a tiny pool, so hits,
evictions and failed allocations are frequent. Beside the manager the machine keeps a simple
model: each live request's block table, per block the token prefix whose KV was last written
into it, and a list model of the free queue with a dict of ref counts, which applies the
profile's free order (C1) and null-block rule (C2) to every call the manager makes into its
pool. A second manager that always takes the staged (vLLM-shaped) allocate_slots path must
agree with the first one on every block id. Every distinct release profile runs every machine.

Profiles: HYPOTHESIS_PROFILE=long runs 10,000 examples per machine at 0.14 and 1,000 at each
later profile; the default runs 200 at 0.14 and 25 at each later profile.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
)

from allocator.hashing import get_request_block_hasher, init_none_hash, sha256
from allocator.kv_cache_blocks import KVCacheBlocks
from allocator.kv_cache_manager import KVCacheManager
from allocator.kv_cache_spec import KVCacheConfig
from allocator.profiles import VllmProfile, distinct_profiles, profile_for
from allocator.request import Request
from tests.property.queue_model import QueueModel

BS = 2
MAX_MODEL_LEN = 40
PREFIXES = ([0, 1, 0, 1, 2], [0, 1, 1], [2, 2, 2, 2, 2, 2], [])
TOKENS = st.integers(0, 2)
MAX_BLOCK_ID = 13

_COMMON = {
    "deadline": None,
    "stateful_step_count": 30,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}
LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
PROFILE = settings(max_examples=10_000 if LONG else 200, **_COMMON)
LATER_PROFILE = settings(max_examples=1_000 if LONG else 25, **_COMMON)


def staged_allocate(manager: KVCacheManager, request: Request, *args: Any, **kw: Any) -> Any:
    """allocate_slots forced through the staged path (the fast path's reference)."""
    names = (
        "num_new_tokens",
        "num_new_computed_tokens",
        "new_computed_blocks",
        "num_lookahead_tokens",
    )
    full = {"num_new_computed_tokens": 0, "new_computed_blocks": None, "num_lookahead_tokens": 0}
    full.update(dict(zip(names, args)))
    full.update(kw)
    return manager._allocate_slots_staged(
        request,
        full["num_new_tokens"],
        full["num_new_computed_tokens"],
        full["new_computed_blocks"],
        full["num_lookahead_tokens"],
        0,
        False,
        full.get("full_sequence_must_fit", False),
    )


class AllocatorMachine(RuleBasedStateMachine):
    """KVCacheManager beside a dict model of block tables and block contents."""

    NUM_BLOCKS = 14
    SLIDING_WINDOW: int | None = None
    ENABLE_CACHING = True
    VLLM_PROFILE: VllmProfile = profile_for("0.14")

    live = Bundle("live")

    def __init__(self) -> None:
        super().__init__()
        init_none_hash(sha256)
        config = KVCacheConfig(self.NUM_BLOCKS, BS, self.SLIDING_WINDOW)
        profile = self.VLLM_PROFILE
        self.manager = KVCacheManager(
            config, MAX_MODEL_LEN, enable_caching=self.ENABLE_CACHING, log_stats=True,
            vllm_profile=profile,
        )
        self.shadow = KVCacheManager(config, MAX_MODEL_LEN, enable_caching=self.ENABLE_CACHING,
                                     vllm_profile=profile)
        self.queue_model = QueueModel(self.manager.block_pool, profile)
        self.hasher = (get_request_block_hasher(BS, sha256, profile.extra_keys)
                       if self.ENABLE_CACHING else None)
        self.requests: dict[str, Request] = {}
        self.tables: dict[str, list[int]] = {}
        self.waiting: set[str] = set()
        self.written: dict[int, tuple[Any, ...]] = {}
        self.shadow_hits: KVCacheBlocks | None = None
        self.next_id = 0

    # ---- helpers -------------------------------------------------------------------------

    def content(self, request: Request, end: int) -> tuple[Any, ...]:
        """What a slot ending the prefix ``[:end]`` holds: KV depends on the whole prefix."""
        return (request.cache_salt or None, tuple(request.all_token_ids[:end]))

    def snapshot(self) -> tuple[Any, ...]:
        pool = self.manager.block_pool
        stm = self.manager.single_type_manager
        return (
            [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
            [b.ref_cnt for b in pool.blocks[1:]],
            [b.block_hash for b in pool.blocks],
            {
                rid: [b.block_id for b in blocks]
                for rid, blocks in stm.req_to_blocks.items()
                if blocks
            },
            dict(stm.num_cached_block),
        )

    def allocate(self, request: Request, *args: Any, **kw: Any) -> KVCacheBlocks | None:
        """Call both managers; they must agree; a failure must leave the manager unchanged."""
        before = self.snapshot()
        cached_free = {i for i, h in enumerate(before[2]) if h is not None} & set(before[0])
        result = self.manager.allocate_slots(request, *args, **kw)
        shadow_args = list(args)
        if len(shadow_args) >= 3 and shadow_args[2] is not None:
            shadow_args[2] = self.shadow_hits
        shadow_result = staged_allocate(self.shadow, request, *shadow_args, **kw)
        assert (result is None) == (shadow_result is None)
        if result is None:
            event("allocate_slots failed")
            self.check_failed_allocation(request, before)
            return None
        assert result.get_block_ids() == shadow_result.get_block_ids()
        if cached_free & set(result.get_block_ids()[0]):
            event("cached free block reused (lazy eviction)")
        return result

    def check_failed_allocation(self, request: Request, before: tuple[Any, ...]) -> None:
        after = self.snapshot()
        if self.SLIDING_WINDOW is None or request.request_id not in before[3]:
            assert after == before
            return
        # Sliding window frees out-of-window blocks before checking space (vLLM stage 1):
        # only this request's leading blocks may have turned null, and only they were freed.
        old, new = before[3][request.request_id], after[3][request.request_id]
        assert len(old) == len(new)
        assert all(n == o or n == 0 for o, n in zip(old, new))
        assert after[2] == before[2] and after[4] == before[4]
        assert {rid: t for rid, t in after[3].items() if rid != request.request_id} == {
            rid: t for rid, t in before[3].items() if rid != request.request_id
        }

    def record_writes(self, request: Request, start: int, end: int) -> None:
        """The request computes tokens [start, end): their slots now hold its prefix."""
        table = self.manager.get_block_ids(request.request_id)[0]
        for pos in range(start, end):
            block_id = table[pos // BS]
            assert block_id != 0, f"token {pos} of {request.request_id} written to the null block"
            assert self.manager.block_pool.blocks[block_id].ref_cnt == 1, "write to shared block"
            self.written[block_id] = self.content(request, pos + 1)

    def sync_table(self, request: Request, new_ids: list[int], total_computed: int) -> None:
        """Model table: append new ids; null the blocks wholly behind the window."""
        table = self.tables[request.request_id]
        table.extend(new_ids)
        if self.SLIDING_WINDOW is not None:
            skipped = max(0, total_computed - self.SLIDING_WINDOW + 1) // BS
            for i in range(min(skipped, len(table))):
                table[i] = 0

    def start(self, request: Request, chunk: int, gate: bool = False) -> bool:
        """Prefix lookup then the first prefill chunk; False if the pool is short."""
        hit_blocks, num_hit = self.manager.get_computed_blocks(request)
        shadow_hits, shadow_num_hit = self.shadow.get_computed_blocks(request)
        assert shadow_hits.get_block_ids() == hit_blocks.get_block_ids()
        assert num_hit == shadow_num_hit and num_hit <= request.num_tokens - 1
        hit_ids = hit_blocks.get_block_ids()[0]
        if num_hit:
            event("prefix hit")
        if any(b.ref_cnt == 0 and not b.is_null for b in hit_blocks.blocks[0]):
            event("hit on an evictable block")
        for i, block_id in enumerate(hit_ids):
            if block_id != 0:
                assert self.written.get(block_id) == self.content(request, (i + 1) * BS)
        self.shadow_hits = shadow_hits
        num_new = min(request.num_tokens - num_hit, chunk)
        kw = {"full_sequence_must_fit": True} if gate else {}
        new = self.allocate(request, num_new, num_hit, hit_blocks, **kw)
        if new is None:
            return False
        request.num_computed_tokens = num_hit
        self.tables[request.request_id] = list(hit_ids)
        self.record_writes(request, num_hit, num_hit + num_new)
        request.num_computed_tokens += num_new
        self.sync_table(request, new.get_block_ids()[0], num_hit)
        return True

    # ---- rules ---------------------------------------------------------------------------

    @rule(
        target=live,
        prefix=st.sampled_from(PREFIXES),
        suffix=st.lists(TOKENS, max_size=7),
        salt=st.sampled_from([None, None, None, "salt", ""]),
        chunk=st.integers(1, 16),
        gate=st.booleans(),
    )
    def admit(
        self, prefix: list[int], suffix: list[int], salt: str | None, chunk: int, gate: bool
    ) -> Any:
        tokens = prefix + suffix or [1]
        request = Request(
            f"r{self.next_id}", tokens, max_tokens=64, cache_salt=salt, block_hasher=self.hasher
        )
        self.next_id += 1
        if not self.start(request, chunk, gate):
            return multiple()
        self.requests[request.request_id] = request
        return request.request_id

    @rule(rid=live, token=TOKENS, chunk=st.integers(1, 8), lookahead=st.integers(0, 2))
    def step(self, rid: str, token: int, chunk: int, lookahead: int) -> None:
        request = self.requests.get(rid)
        if request is None or rid in self.waiting or request.num_tokens >= MAX_MODEL_LEN - 3:
            return
        if request.num_computed_tokens == request.num_tokens:
            request.append_output_token_ids(token)
        start = request.num_computed_tokens
        num_new = min(request.num_tokens - start, chunk)
        new = self.allocate(request, num_new, num_lookahead_tokens=lookahead)
        if new is None:
            self.do_preempt(request)
            return
        self.record_writes(request, start, start + num_new)
        request.num_computed_tokens += num_new
        self.sync_table(request, new.get_block_ids()[0], start)

    @rule(rid=live)
    def preempt(self, rid: str) -> None:
        request = self.requests.get(rid)
        if request is not None and rid not in self.waiting:
            self.do_preempt(request)

    def do_preempt(self, request: Request) -> None:
        self.manager.free(request)
        self.shadow.free(request)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.add(request.request_id)
        self.tables.pop(request.request_id, None)

    @rule(rid=live, chunk=st.integers(1, 16))
    def resume(self, rid: str, chunk: int) -> None:
        request = self.requests.get(rid)
        if request is None or rid not in self.waiting:
            return
        if self.start(request, chunk):
            self.waiting.discard(rid)

    @rule(rid=consumes(live))
    def free(self, rid: str) -> None:
        request = self.requests.pop(rid)
        self.manager.free(request)
        self.shadow.free(request)
        self.manager.free(request)  # a second free of a request holding nothing is a no-op
        self.tables.pop(rid, None)
        self.waiting.discard(rid)

    @rule(block_ids=st.sets(st.integers(0, MAX_BLOCK_ID), max_size=3))
    def evict(self, block_ids: set[int]) -> None:
        block_ids = {b for b in block_ids if b < self.NUM_BLOCKS}
        self.manager.evict_blocks(block_ids)
        self.shadow.evict_blocks(block_ids)

    @precondition(lambda self: self.ENABLE_CACHING)
    @rule()
    def reset_prefix_cache(self) -> None:
        all_free = not any(self.tables.values())
        assert self.manager.reset_prefix_cache() is all_free
        assert self.shadow.reset_prefix_cache() is all_free
        if all_free:
            assert all(b.block_hash is None for b in self.manager.block_pool.blocks)

    # ---- invariants ----------------------------------------------------------------------

    @invariant()
    def pool_matches_model(self) -> None:
        self.manager.check_invariants()
        self.shadow.check_invariants()
        holders = [0] * self.NUM_BLOCKS
        for rid, table in self.tables.items():
            assert self.manager.get_block_ids(rid) == (table,)
            assert self.shadow.get_block_ids(rid) == (table,)
            for block_id in table:
                if block_id:
                    holders[block_id] += 1
        pool = self.manager.block_pool
        assert [b.ref_cnt for b in pool.blocks[1:]] == holders[1:]
        queue = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
        shadow_queue = [
            b.block_id for b in self.shadow.block_pool.free_block_queue.get_all_free_blocks()
        ]
        assert queue == shadow_queue
        self.queue_model.check()

    def teardown(self) -> None:
        for request in self.requests.values():
            self.manager.free(request)
        pool = self.manager.block_pool
        assert pool.get_num_free_blocks() == self.NUM_BLOCKS - 1
        self.manager.check_invariants()
        stats = self.manager.make_prefix_cache_stats()
        assert stats is not None and stats.hits <= stats.queries


class SlidingWindowMachine(AllocatorMachine):
    """The same machine with a 5-token sliding window (null blocks, early frees)."""

    SLIDING_WINDOW = 5


class NoCachingMachine(AllocatorMachine):
    """The same machine with prefix caching off."""

    ENABLE_CACHING = False
    NUM_BLOCKS = 10


MACHINES = (AllocatorMachine, SlidingWindowMachine, NoCachingMachine)


def _profile_cases() -> dict[str, Any]:
    """One TestCase per machine and distinct profile (0.14 at the full example count)."""
    cases: dict[str, Any] = {}
    for profile in distinct_profiles():
        for machine in MACHINES:
            name = machine.__name__.removesuffix("Machine")
            suffix = "" if profile.version == "0.14" else "_v" + profile.version.replace(".", "_")
            variant = type(f"{name}{suffix}", (machine,), {"VLLM_PROFILE": profile})
            case = variant.TestCase
            case.settings = PROFILE if profile.version == "0.14" else LATER_PROFILE
            cases[f"Test{name}Machine{suffix}"] = case
    return cases


globals().update(_profile_cases())
