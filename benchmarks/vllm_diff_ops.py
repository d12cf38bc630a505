"""The operation executor both sides of ``vllm_diff.py`` share (stdlib only).

One seeded operation stream is replayed through a block manager by :class:`Executor`, which
plays a small scheduler: admissions with prefix lookups (and the release's full-sequence gate),
chunked prefill, decode with lookahead slots, preemption (recompute) and re-admission, frees,
external and delayed-cached tokens, ``evict_blocks``, ``reset_prefix_cache``, zero-token hit
adoption and cascade prefixes. A *backend* builds the manager and requests (vLLM's in its own
interpreter, pagedsim's here); after every operation the executor records what the call
returned and the whole pool state, so the two sides can be compared operation by operation.
"""

from __future__ import annotations

from typing import Any, Protocol

Observation = list[Any]
"""[operation result, free count, free-queue ids, ref counts, block hashes, block tables]."""


class Backend(Protocol):
    """What the executor needs from one implementation."""

    full_sequence_api: str
    """"none", "can_fit_full_sequence" or "allocate_slots" (how the gate is asked)."""

    def make_manager(self, config: dict[str, Any]) -> Any: ...

    def make_request(self, rid: str, tokens: list[int], spec: dict[str, Any]) -> Any: ...

    def computed_blocks(self, manager: Any, request: Any) -> tuple[Any, int]: ...

    def set_status(self, request: Any, status: str) -> None: ...

    def allocate(self, manager: Any, request: Any, args: dict[str, Any]) -> Any: ...


def pool_state(manager: Any, requests: dict[str, Any]) -> Observation:
    """Free count, free-queue order, every ref count and hash, every request's block table."""
    pool = manager.block_pool
    hashes = [None if b.block_hash is None else bytes(b.block_hash).hex()[:16] for b in pool.blocks]
    tables = {rid: list(manager.get_block_ids(rid)[0]) for rid in sorted(requests)}
    return [
        pool.get_num_free_blocks(),
        [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
        [b.ref_cnt for b in pool.blocks],
        hashes,
        tables,
    ]


def _ids(blocks: Any) -> list[int] | None:
    return None if blocks is None else list(blocks.get_block_ids()[0])


class Executor:
    """Replays operations on one fresh manager; :meth:`run` returns one observation per op."""

    def __init__(self, backend: Backend, config: dict[str, Any]) -> None:
        self.backend = backend
        self.config = config
        self.manager = backend.make_manager(config)
        self.running: dict[str, Any] = {}
        self.waiting: dict[str, Any] = {}
        self.delayed: set[str] = set()

    def run(self, ops: list[dict[str, Any]]) -> list[Observation]:
        """Apply ``ops`` in order; an op that does not apply now (no such request) is a no-op."""
        out = []
        for op in ops:
            try:
                result = getattr(self, "op_" + op["op"])(op)
            except (ValueError, AssertionError, RuntimeError, KeyError, IndexError) as exc:
                result = f"error:{type(exc).__name__}"
            live = {**self.running, **self.waiting}
            out.append([result, *pool_state(self.manager, live)])
        return out

    # ---- helpers --------------------------------------------------------------------------

    def _pick(self, table: dict[str, Any], slot: int) -> Any:
        if not table:
            return None
        return table[sorted(table)[slot % len(table)]]

    def _start(self, request: Any, op: dict[str, Any], zero: bool = False) -> Any:
        """Prefix lookup, the gate, then the first chunk (or a zero-token adoption)."""
        backend, manager = self.backend, self.manager
        hits, num_hit = backend.computed_blocks(manager, request)
        room = request.num_tokens - num_hit
        ext = 0 if zero else max(0, min(op.get("ext", 0), room - 1))
        num_new = 0 if zero else min(op["chunk"], room - ext)
        gate = bool(op.get("gate")) and backend.full_sequence_api != "none"
        can_fit = gate and backend.full_sequence_api == "can_fit_full_sequence"
        if can_fit and not manager.can_fit_full_sequence(request, num_hit, hits, ext):
            return [num_hit, _ids(hits), "gated"]
        args = {
            "num_new_tokens": num_new,
            "num_new_computed_tokens": num_hit,
            "new_computed_blocks": hits,
            "num_lookahead_tokens": op.get("lookahead", 0),
            "num_external_computed_tokens": ext,
            "delay_cache_blocks": bool(op.get("delay")),
            "full_sequence_must_fit": gate and backend.full_sequence_api == "allocate_slots",
            "reserved_blocks": op.get("reserved", 0),
            "has_scheduled_reqs": bool(self.running),
        }
        new = backend.allocate(manager, request, args)
        if new is not None:
            rid = request.request_id
            request.num_computed_tokens = min(request.num_tokens, num_hit + ext + num_new)
            backend.set_status(request, "RUNNING")
            self.running[rid] = self.waiting.pop(rid, request)
            if args["delay_cache_blocks"]:
                self.delayed.add(rid)
        return [num_hit, _ids(hits), _ids(new)]

    def _preempt(self, request: Any) -> None:
        self.manager.free(request)
        rid = request.request_id
        del self.running[rid]
        self.delayed.discard(rid)
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.backend.set_status(request, "PREEMPTED")
        self.waiting[rid] = request

    # ---- operations ------------------------------------------------------------------------

    def op_admit(self, op: dict[str, Any]) -> Any:
        request = self.backend.make_request(op["rid"], op["tokens"], op)
        self.waiting[op["rid"]] = request
        return self._start(request, op)

    def op_zero(self, op: dict[str, Any]) -> Any:
        request = self.backend.make_request(op["rid"], op["tokens"], op)
        self.waiting[op["rid"]] = request
        return self._start(request, op, zero=True)

    def op_resume(self, op: dict[str, Any]) -> Any:
        request = self._pick(self.waiting, op["slot"])
        return None if request is None else self._start(request, op)

    def op_step(self, op: dict[str, Any]) -> Any:
        request = self._pick(self.running, op["slot"])
        if request is None:
            return None
        if request.num_tokens + 2 >= self.config["max_model_len"]:
            self.op_free({"slot": 0, "rid": request.request_id})
            return "finished"
        if request.num_computed_tokens >= request.num_tokens:
            request.append_output_token_ids(op["token"])
        start = request.num_computed_tokens
        num_new = min(request.num_tokens - start, op["chunk"])
        new = self.backend.allocate(self.manager, request, {
            "num_new_tokens": num_new,
            "num_lookahead_tokens": op.get("lookahead", 0),
            "delay_cache_blocks": request.request_id in self.delayed,
        })
        if new is None:
            self._preempt(request)
            return "preempted"
        request.num_computed_tokens = start + num_new
        return _ids(new)

    def op_preempt(self, op: dict[str, Any]) -> Any:
        request = self._pick(self.running, op["slot"])
        if request is not None:
            self._preempt(request)
        return None

    def op_free(self, op: dict[str, Any]) -> Any:
        rid = op.get("rid")
        if rid is None:
            live = {**self.running, **self.waiting}
            request = self._pick(live, op["slot"])
            if request is None:
                return None
            rid = request.request_id
        request = self.running.pop(rid, None) or self.waiting.pop(rid)
        self.delayed.discard(rid)
        self.manager.free(request)
        return None

    def op_cache(self, op: dict[str, Any]) -> Any:
        live = {rid: self.running[rid] for rid in self.delayed if rid in self.running}
        request = self._pick(live, op["slot"])
        if request is None:
            return None
        self.delayed.discard(request.request_id)
        self.manager.cache_blocks(request, request.num_computed_tokens)
        return None

    def op_evict(self, op: dict[str, Any]) -> Any:
        self.manager.evict_blocks(set(op["ids"]) & set(range(self.config["num_blocks"])))
        return None

    def op_reset(self, op: dict[str, Any]) -> Any:
        return bool(self.manager.reset_prefix_cache())

    def op_prefix(self, op: dict[str, Any]) -> Any:
        request = self._pick(self.running, op["slot"])
        if request is None:
            return None
        return list(self.manager.get_num_common_prefix_blocks(request.request_id))
