"""Turn trace rows into the simulator's groups and sequences, with their token ids.

Over-length requests are handled as vLLM does: a prompt of ``max_model_len`` tokens or more
is rejected (reason ``prompt_too_long``); a prompt plus output beyond the limit keeps the
prompt and truncates the output to ``max_model_len - prompt``. Token ids come from the trace
when it has them (explicit ids, or Mooncake hash ids expanded block by block), else from
``traces.derive_token_ids(seed, request_id, position)``; sample k > 0 of a request derives
its outputs under the key ``"{request_id}/{k}"`` and a forked beam under
``"{request_id}/b{serial}"``. Requests are built lazily, when first considered for
admission, so a long waiting queue holds no token lists. Rows whose tokens are one derived
run (no shared segments or source ids: the Azure traces, most synthetic ones) are derived
and hashed ``PREFETCH`` at a time in one vectorised pass; each sequence is a ``SimRequest``
over its token array. A row's ``lora_name`` and ``cache_salt`` go into its requests (and so
into their block hashes), its ``priority`` into its group.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from allocator.request import Request
from sim.config import RunConfig
from sim.workload.block_hash import FastBlockHasher
from sim.workload.sequence import Group, Seq
from sim.workload.sim_request import SimRequest
from traces import Trace, derive_token_ids
from traces.tokens import derive_token_runs

PREFETCH = 256
"""Rows whose tokens (and fast block hashes) are derived together, ahead of admission."""


class Workload:
    """Builds groups and sequences for one run over ``trace``.

    Args:
        trace: the requests, in arrival order.
        config: the run's configuration (max_model_len, n, beam width).
        hasher: the block hasher for prefix caching (with a ``FastBlockHasher`` each
            sequence's whole token list is hashed in advance), or None when caching is off.
    """

    def __init__(self, trace: Trace, config: RunConfig, hasher: Any) -> None:
        self.trace = trace
        self.max_model_len = config.scheduler.max_model_len
        self.hasher = hasher
        self.fast_hasher = hasher if isinstance(hasher, FastBlockHasher) else None
        self.seed = trace.seed
        self.ids = trace.request_ids.tolist()
        self.arrivals = trace.arrival_s.tolist()
        self.prompt_lens = trace.prompt_lens.tolist()
        self.output_lens = trace.output_lens.tolist()
        self.n: list[int] = trace.n.tolist() if config.workload.n is None else [config.workload.n] * len(trace)
        self.beam_width: list[int] = (trace.beam_width.tolist() if config.workload.beam_width is None
                                      else [config.workload.beam_width] * len(trace))
        self.lines = trace.lines.tolist() if trace.lines is not None else None
        self.num_forks = 0
        self.derived = trace.derived_rows().tolist()
        self.salts = _names(trace.cache_salts)
        self.loras = _names(trace.lora_names)
        self.priorities = trace.priorities.tolist() if trace.priorities is not None else None
        self.acceptance_rates: list[float] | None = (
            None if trace.acceptance_rates is None else trace.acceptance_rates.tolist())
        """Per row, the trace's draft acceptance rate (NaN: the run's ``--acceptance-rate``)."""
        self.ready: dict[int, tuple[np.ndarray, list[bytes] | None]] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def make_group(self, index: int) -> Group:
        """The group for trace row ``index``, with its output truncated or its rejection set."""
        prompt = self.prompt_lens[index]
        line = self.lines[index] if self.lines is not None and self.lines[index] > 0 else None
        group = Group(index, self.ids[index], self.arrivals[index], prompt,
                      self.output_len(index), self.output_lens[index], self.n[index],
                      self.beam_width[index], line)
        if prompt >= self.max_model_len:
            group.reject_reason = "prompt_too_long"
        if self.priorities is not None:
            group.priority = self.priorities[index]
        return group

    def serving_fields(self, index: int) -> tuple[str | None, str | None]:
        """Row ``index``'s (lora_name, cache_salt), None where it has none."""
        return (self.loras[index] if self.loras is not None else None,
                self.salts[index] if self.salts is not None else None)

    def _key_lanes(self, index: int) -> Any:
        """The fast hasher's digested extra keys of row ``index`` (None: none)."""
        if self.fast_hasher is None or (self.loras is None and self.salts is None):
            return None
        return self.fast_hasher.key_lanes(*self.serving_fields(index))

    def output_len(self, index: int) -> int:
        """Row ``index``'s output length after truncation to ``max_model_len`` (a prompt of
        ``max_model_len`` or more keeps its length; that row is rejected)."""
        prompt, wanted = self.prompt_lens[index], self.output_lens[index]
        limit = self.max_model_len
        return wanted if prompt >= limit else min(wanted, limit - prompt)

    def first_seqs(self, group: Group, split: bool) -> list[Seq]:
        """The sequences a group starts with: all of them when ``split`` (independent
        samples or beams), else one that forks the others after its prefill."""
        count = group.width if split else 1
        index = group.index
        if self.derived[index] and index not in self.ready:
            self._prefetch(index)
        seqs = []
        ready = self.ready.pop(index, None)
        if ready is not None:
            tokens, hashes = ready
            seqs.append(self._new_seq(group, 0, tokens, group.prompt_len, hashes))
        prompt = None
        for sample in range(len(seqs), count):
            if prompt is None:
                prompt = self.trace.prompt_token_ids(index)
            out = self.trace.output_token_ids(index, sample)[:group.output_len]
            seqs.append(self._new_seq(group, sample, np.concatenate([prompt, out]),
                                      len(prompt)))
        return seqs

    def child_seq(self, parent: Seq, sample: int) -> Seq:
        """A cow sample forked from ``parent`` right after prefill (same prompt, own outputs)."""
        group = parent.group
        prompt = np.array(parent.req.prompt_token_ids, dtype=np.int32)
        out = self.trace.output_token_ids(group.index, sample)[:group.output_len]
        return self._new_seq(group, sample, np.concatenate([prompt, out]), len(prompt))

    def beam_child(self, parent: Seq) -> Seq:
        """A beam forked from ``parent``: its tokens so far, then its own continuation."""
        group = parent.group
        self.num_forks += 1
        label = f"{group.request_id}/b{self.num_forks}"
        parent.flush()
        start = parent.num_tokens
        rest = group.output_len - parent.num_out
        own = derive_token_ids(self.seed, label, start, rest, self.trace.vocab_size).tolist()
        lora_name, cache_salt = self.serving_fields(group.index)
        req = Request(label, parent.req.prompt_token_ids, group.output_len,
                      arrival_time=group.arrival, lora_name=lora_name, cache_salt=cache_salt,
                      priority=group.priority, block_hasher=self.hasher,
                      final_output_len=group.output_len)
        req.append_output_token_ids(parent.req.output_token_ids)
        done = parent.out_ids[:parent.num_out]
        out_ids = (done.tolist() if isinstance(done, np.ndarray) else list(done)) + own
        return Seq(req, group, parent.sample, label, out_ids, parent.num_out)

    def _prefetch(self, index: int) -> None:
        """Make row ``index``'s window of PREFETCH rows ready: the derived rows' tokens (and
        fast block hashes) in one vectorised pass. Windows are fixed (``index // PREFETCH``),
        so what a row gets never depends on when it was asked for. Rows whose prompt will be
        rejected (``max_model_len`` or more) are skipped: their tokens are never needed."""
        first = index // PREFETCH * PREFETCH
        rows = [i for i in range(first, min(first + PREFETCH, len(self.ids)))
                if self.derived[i] and self.prompt_lens[i] < self.max_model_len]
        tokens, offsets = derive_token_runs(
            self.seed, [str(self.ids[i]) for i in rows],
            [self.prompt_lens[i] + self.output_len(i) for i in rows], self.trace.vocab_size)
        if self.fast_hasher is None:
            for k, i in enumerate(rows):
                self.ready[i] = (tokens[offsets[k]:offsets[k + 1]], None)
            return
        hashes, block_offsets = self.fast_hasher.hash_runs(
            tokens, offsets, [self._key_lanes(i) for i in rows])
        for k, i in enumerate(rows):
            self.ready[i] = (tokens[offsets[k]:offsets[k + 1]],
                             hashes[block_offsets[k]:block_offsets[k + 1]])

    def _new_seq(self, group: Group, sample: int, tokens: np.ndarray, num_prompt: int,
                 hashes: list[bytes] | None = None) -> Seq:
        label = group.request_id if sample == 0 else f"{group.request_id}/{sample}"
        if self.fast_hasher is not None and hashes is None:
            hashes = self.fast_hasher.hash_tokens(tokens, keys=self._key_lanes(group.index))
        lora_name, cache_salt = self.serving_fields(group.index)
        req = SimRequest(label, tokens, num_prompt, group.output_len,
                         arrival_time=group.arrival, block_hasher=self.hasher,
                         final_output_len=group.output_len, block_hashes=hashes,
                         lora_name=lora_name, cache_salt=cache_salt, priority=group.priority)
        # The outputs stay a view of the array: a SimRequest only counts appended ids.
        return Seq(req, group, sample, label, tokens[num_prompt:])


def _names(column: Any) -> list[str | None] | None:
    """A trace's string column as a list with None for "" (vLLM: an empty salt is no salt)."""
    if column is None:
        return None
    names = [str(value) or None for value in column.tolist()]
    return names if any(names) else None
