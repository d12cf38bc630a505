"""A request whose token ids are known before it runs (trace prompt plus derived outputs).

The simulator knows every token a sequence will ever hold when it builds it, so
``SimRequest`` keeps them in one numpy array and moves a counter as outputs are appended. The
allocator sees the same request as with ``allocator.request.Request``: ``num_tokens``,
``block_hashes`` (extended by the block hasher as blocks fill), ``num_computed_tokens``. Token
lists are built only when something asks for them (the allocation log, a vLLM hasher that
reads tokens), so a 20,000-request replay copies no token lists.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from allocator.hashing import BlockHash, num_hashable_blocks
from allocator.request import BlockHasher, Request


class SimRequest(Request):
    """``Request`` over a fixed token array: ``tokens[:num_prompt]`` is the prompt and the
    rest are the outputs in the order they will be appended.

    Appending output ids advances the counter: the ids given must be the array's next ones
    (the simulator passes slices of the same derived outputs); only their count is used.
    ``block_hashes`` (optional) are the hasher's hashes of every full block of ``tokens`` (that
    its lookahead tokens follow: ``num_hashable_blocks``), computed in advance; filled blocks then take theirs from it instead of calling the hasher.
    ``prompt_token_ids``, ``all_token_ids`` and ``output_token_ids`` return fresh lists.
    ``lora_name``, ``cache_salt`` and ``priority`` are the trace's serving fields (the
    hashers read the first two as extra keys).

    Raises:
        ValueError: an empty prompt, ``max_tokens < 1``, or appending past the array.
    """

    __slots__ = ("_hashes", "_num_prompt", "_num_tokens", "_tokens")

    def __init__(
        self,
        request_id: str,
        tokens: npt.NDArray[np.integer],
        num_prompt: int,
        max_tokens: int,
        arrival_time: float = 0.0,
        block_hasher: BlockHasher | None = None,
        final_output_len: int | None = None,
        block_hashes: list[BlockHash] | None = None,
        lora_name: str | None = None,
        cache_salt: str | None = None,
        priority: int = 0,
    ) -> None:
        if num_prompt < 1 or num_prompt > len(tokens):
            raise ValueError(f"request {request_id!r}: prompt length {num_prompt} outside "
                             f"1..{len(tokens)}")
        self.request_id = request_id
        self._tokens = tokens
        self._num_prompt = num_prompt
        self._num_tokens = num_prompt
        self._init_state(max_tokens, arrival_time, lora_name, cache_salt, priority, block_hasher,
                         final_output_len, False)
        self._hashes = None
        if block_hasher is not None and block_hashes is not None and self._hash_step:
            expected = num_hashable_blocks(len(tokens), self._hash_step, self._hash_lookahead)
            if len(block_hashes) != expected:
                raise ValueError(f"request {request_id!r}: {len(block_hashes)} block hashes for "
                                 f"{len(tokens)} tokens of blocks of {self._hash_step} "
                                 f"(lookahead {self._hash_lookahead}): {expected} expected")
            self._hashes = block_hashes
            # The prompt's blocks take their hashes from the table as appended outputs do.
            self._num_tokens = 0
            self._next_hash_at = self._hash_lookahead
            self.advance_to(num_prompt)
        elif block_hasher is not None:
            self._update_block_hashes()

    @property
    def prompt_token_ids(self) -> list[int]:  # type: ignore[override]
        """The prompt (a new list)."""
        return self._tokens[: self._num_prompt].tolist()  # type: ignore[no-any-return]

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    @property
    def num_prompt_tokens(self) -> int:
        return self._num_prompt

    @property
    def num_output_tokens(self) -> int:
        return self._num_tokens - self._num_prompt

    @property
    def output_token_ids(self) -> list[int]:
        """The outputs appended so far (a new list)."""
        return self._tokens[self._num_prompt : self._num_tokens].tolist()  # type: ignore[no-any-return]

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt and appended outputs (a new list)."""
        return self._tokens[: self._num_tokens].tolist()  # type: ignore[no-any-return]

    @property
    def token_array(self) -> npt.NDArray[np.integer]:
        """Every token this request will hold (read only by convention)."""
        return self._tokens

    def append_output_token_ids(self, token_ids: int | list[int]) -> None:
        """Advance past the next output ids (one int or a list) and hash any filled block."""
        self.advance_to(self._num_tokens + (1 if isinstance(token_ids, int) else len(token_ids)))

    def advance_to(self, num_tokens: int) -> None:
        """Append the known outputs up to ``num_tokens`` tokens in all (no ids to pass: the
        simulator's fast path); hashes any filled block. Fewer tokens than now is a no-op."""
        if num_tokens <= self._num_tokens:
            return
        if num_tokens > len(self._tokens):
            raise ValueError(f"request {self.request_id!r}: advancing to {num_tokens} tokens "
                             f"passes the {len(self._tokens)} known tokens")
        self._num_tokens = num_tokens
        if num_tokens >= self._next_hash_at:
            hashes = self._hashes
            if hashes is None:
                self._update_block_hashes()  # Request's: the hasher reads the tokens
                return
            # Every full block's hash is known: take the ones that just filled and have their
            # lookahead tokens (num_hashable_blocks written in place rather than called: this
            # runs at every block a decode fills; num_tokens >= _next_hash_at >= lookahead).
            done = self.block_hashes
            have = len(done)
            step = self._hash_step
            lookahead = self._hash_lookahead
            num_full = (num_tokens - lookahead) // step
            if num_full == have + 1:
                done.append(hashes[have])
            else:
                done.extend(hashes[have:num_full])
            self._next_hash_at = (num_full + 1) * step + lookahead
