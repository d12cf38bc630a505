"""Turn trace rows into the simulator's groups and sequences, with their token ids.

Over-length requests are handled as vLLM does: a prompt of ``max_model_len`` tokens or more
is rejected (reason ``prompt_too_long``); a prompt plus output beyond the limit keeps the
prompt and truncates the output to ``max_model_len - prompt``. Token ids come from the trace
when it has them (explicit ids, or Mooncake hash ids expanded block by block), else from
``traces.derive_token_ids(seed, request_id, position)``; sample k > 0 of a request derives
its outputs under the key ``"{request_id}/{k}"`` and a forked beam under
``"{request_id}/b{serial}"``. Requests are built lazily, when first considered for
admission, so a long waiting queue holds no token lists.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from allocator.request import Request
from sim.block_hash import FastBlockHasher
from sim.sequence import Group, Seq
from traces import derive_token_ids

if TYPE_CHECKING:
    from sim.options import SchedulerConfig
    from traces import Trace


class Workload:
    """Builds groups and sequences for one run over ``trace``.

    Args:
        trace: the requests, in arrival order.
        config: scheduler options (max_model_len, n, beam width, sampling mode, seed).
        hasher: the block hasher for prefix caching (a ``FastBlockHasher`` also gets each
            sequence's whole token list in advance), or None when caching is off.
    """

    def __init__(self, trace: Trace, config: SchedulerConfig, hasher: Any) -> None:
        self.trace = trace
        self.config = config
        self.hasher = hasher
        self.table = hasher if isinstance(hasher, FastBlockHasher) else None
        self.seed = trace.seed
        self.ids = trace.request_ids.tolist()
        self.arrivals = trace.arrival_s.tolist()
        self.prompt_lens = trace.prompt_lens.tolist()
        self.output_lens = trace.output_lens.tolist()
        self.n: list[int] = trace.n.tolist() if config.n is None else [config.n] * len(trace)
        self.beam_width: list[int] = (trace.beam_width.tolist() if config.beam_width is None
                                      else [config.beam_width] * len(trace))
        self.lines = trace.lines.tolist() if trace.lines is not None else None
        self.num_forks = 0

    def __len__(self) -> int:
        return len(self.ids)

    def make_group(self, index: int) -> Group:
        """The group for trace row ``index``, with its output truncated or its rejection set."""
        prompt = self.prompt_lens[index]
        wanted = self.output_lens[index]
        limit = self.config.max_model_len
        output = wanted if prompt >= limit else min(wanted, limit - prompt)
        line = self.lines[index] if self.lines is not None and self.lines[index] > 0 else None
        group = Group(index, self.ids[index], self.arrivals[index], prompt, output, wanted,
                      self.n[index], self.beam_width[index], line)
        if prompt >= limit:
            group.reject_reason = "prompt_too_long"
        return group

    def first_seqs(self, group: Group, split: bool) -> list[Seq]:
        """The sequences a group starts with: all of them when ``split`` (independent
        samples or beams), else one that forks the others after its prefill."""
        array = self.trace.prompt_token_ids(group.index)
        prompt = array.tolist()
        count = group.width if split else 1
        return [self._new_seq(group, sample, prompt, array) for sample in range(count)]

    def child_seq(self, parent: Seq, sample: int) -> Seq:
        """A cow sample forked from ``parent`` right after prefill (same prompt, own outputs)."""
        prompt = parent.req.prompt_token_ids
        return self._new_seq(parent.group, sample, prompt, np.array(prompt, dtype=np.int64))

    def beam_child(self, parent: Seq) -> Seq:
        """A beam forked from ``parent``: its tokens so far, then its own continuation."""
        group = parent.group
        self.num_forks += 1
        label = f"{group.request_id}/b{self.num_forks}"
        parent.flush()
        start = parent.num_tokens
        rest = group.output_len - parent.num_out
        own = derive_token_ids(self.seed, label, start, rest, self.trace.vocab_size).tolist()
        req = Request(label, parent.req.prompt_token_ids, group.output_len,
                      arrival_time=group.arrival, block_hasher=self.hasher,
                      final_output_len=group.output_len)
        req.append_output_token_ids(parent.req.output_token_ids)
        out_ids = parent.out_ids[:parent.num_out] + own
        return Seq(req, group, parent.sample, label, out_ids, parent.num_out)

    def _new_seq(self, group: Group, sample: int, prompt: list[int],
                 array: np.ndarray) -> Seq:
        label = group.request_id if sample == 0 else f"{group.request_id}/{sample}"
        out = self.trace.output_token_ids(group.index, sample)[:group.output_len]
        if self.table is not None:
            self.table.register(label, np.concatenate([array, out]))
        req = Request(label, prompt, group.output_len, arrival_time=group.arrival,
                      block_hasher=self.hasher, final_output_len=group.output_len)
        return Seq(req, group, sample, label, out.tolist())

    def release(self, seq: Seq) -> None:
        """Forget a finished sequence's precomputed hashes."""
        if self.table is not None:
            self.table.forget(seq.label)
