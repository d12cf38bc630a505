"""The request as the KV-cache manager sees it (vLLM v0.14 ``vllm/v1/request.py``, trimmed).

A request owns its token ids (prompt plus accepted outputs), its scheduling progress
(``num_computed_tokens``) and its chained full-block hashes, which an injected block hasher keeps
up to date as output tokens are appended. The simulator appends one token per step per running
request, so the append path is kept short: the hasher is only called once a block fills up.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

from allocator.hashing import BlockHash

BlockHasher = Callable[["Request"], list[BlockHash]]
"""``hasher(request)`` returns the hashes of the request's full blocks not yet hashed."""


class RequestStatus:
    """The scheduler states the manager reads (vLLM's ``RequestStatus``; the watermark of
    0.24+ applies to WAITING and PREEMPTED requests only). The scheduler sets them."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"


class Request:
    """One inference request.

    Invariants:
        ``all_token_ids == prompt_token_ids + output_token_ids``; ``block_hashes`` holds the
        chained hash of every full block of ``all_token_ids`` when a block hasher is set (of
        every block followed by the hasher's ``lookahead`` tokens; empty without a hasher); ``0 <= num_computed_tokens <= num_tokens`` is kept by the
        caller (the scheduler), not checked here.

    ``final_output_len`` is simulation-only: the true number of output tokens the request will
    produce (from a trace), which vLLM discovers only when it samples EOS. ``output_token_ids``
    and ``all_token_ids`` return the live lists for speed: read them, never mutate them.
    """

    __slots__ = (
        "_all_token_ids",
        "_block_hasher",
        "_hash_lookahead",
        "_hash_step",
        "_next_hash_at",
        "_output_token_ids",
        "arrival_time",
        "block_hashes",
        "cache_salt",
        "final_output_len",
        "lora_name",
        "lora_path",
        "max_tokens",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_in_flight_tokens",
        "num_preemptions",
        "priority",
        "prompt_token_ids",
        "request_id",
        "skip_reading_prefix_cache",
        "status",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Iterable[int],
        max_tokens: int,
        arrival_time: float = 0.0,
        lora_name: str | None = None,
        cache_salt: str | None = None,
        priority: int = 0,
        block_hasher: BlockHasher | None = None,
        final_output_len: int | None = None,
        skip_reading_prefix_cache: bool = False,
        lora_path: str | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids: list[int] = list(prompt_token_ids)
        if not self.prompt_token_ids:
            raise ValueError(f"request {request_id!r}: prompt_token_ids is empty")
        self._output_token_ids: list[int] = []
        self._all_token_ids: list[int] = list(self.prompt_token_ids)
        self._init_state(max_tokens, arrival_time, lora_name, cache_salt, priority, block_hasher,
                         final_output_len, skip_reading_prefix_cache)
        self.lora_path: str | None = lora_path
        if block_hasher is not None:
            self._update_block_hashes()

    def _init_state(
        self,
        max_tokens: int,
        arrival_time: float,
        lora_name: str | None,
        cache_salt: str | None,
        priority: int,
        block_hasher: BlockHasher | None,
        final_output_len: int | None,
        skip_reading_prefix_cache: bool,
    ) -> None:
        """Everything but the token ids (shared with subclasses that hold tokens otherwise)."""
        request_id = self.request_id
        if max_tokens < 1:
            raise ValueError(f"request {request_id!r}: max_tokens must be >= 1, got {max_tokens}")
        if final_output_len is not None and final_output_len < 0:
            raise ValueError(
                f"request {request_id!r}: final_output_len must be >= 0, got {final_output_len}"
            )
        self.max_tokens = max_tokens
        self.arrival_time = arrival_time
        self.lora_name = lora_name
        self.cache_salt = cache_salt
        self.priority = priority
        self.final_output_len = final_output_len
        self.skip_reading_prefix_cache = skip_reading_prefix_cache
        self.num_computed_tokens = 0
        self.num_cached_tokens = -1
        self.num_preemptions = 0
        self.lora_path = None
        self.status = RequestStatus.WAITING
        # Tokens scheduled but not yet processed (async scheduling, 0.26+ sliding-window frees).
        self.num_in_flight_tokens = 0
        self.block_hashes: list[BlockHash] = []
        self._block_hasher = block_hasher
        # A hasher that publishes its block size is only called when a block fills up (and
        # its published ``lookahead`` tokens after it exist); any other callable is called on
        # every append (step 0), as vLLM does.
        hash_block_size = getattr(block_hasher, "block_size", None)
        self._hash_step = (
            hash_block_size if isinstance(hash_block_size, int) and hash_block_size > 0 else 0
        )
        lookahead = getattr(block_hasher, "lookahead", 0)
        self._hash_lookahead = lookahead if isinstance(lookahead, int) and lookahead > 0 else 0
        self._next_hash_at = sys.maxsize

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens."""
        return len(self._all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        """Length of the prompt."""
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        """Number of output tokens appended so far."""
        return len(self._output_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        """The output tokens (the live list: do not mutate)."""
        return self._output_token_ids

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt then output tokens (the live list: do not mutate)."""
        return self._all_token_ids

    @property
    def block_hasher(self) -> BlockHasher | None:
        """The injected block hasher, or None when hashing is disabled."""
        return self._block_hasher

    def append_output_token_ids(self, token_ids: int | list[int]) -> None:
        """Append one or more output tokens and hash any block that became full."""
        all_token_ids = self._all_token_ids
        if isinstance(token_ids, int):
            self._output_token_ids.append(token_ids)
            all_token_ids.append(token_ids)
        else:
            self._output_token_ids.extend(token_ids)
            all_token_ids.extend(token_ids)
        if len(all_token_ids) >= self._next_hash_at:
            self._update_block_hashes()

    def _update_block_hashes(self) -> None:
        hasher = self._block_hasher
        assert hasher is not None
        block_hashes = self.block_hashes
        block_hashes.extend(hasher(self))
        self._next_hash_at = (len(block_hashes) + 1) * self._hash_step + self._hash_lookahead

    def __repr__(self) -> str:
        return (
            f"Request(request_id={self.request_id!r}, num_prompt_tokens={self.num_prompt_tokens}, "
            f"num_output_tokens={self.num_output_tokens}, "
            f"num_computed_tokens={self.num_computed_tokens})"
        )
