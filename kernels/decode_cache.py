"""Bound launches of validated attention calls, found again without re-running the checks.

`paged_decode_attention` keeps them at two levels. FAST, by `fast_key`: every property the
checks read, so a hit means "validated before" whatever tensors carry them; q's and out's are
read every call (a forward pass makes fresh views per layer and step), the caches', block
tables' and lengths' are numbered once per pair of tensors and the number kept while the same
pair comes unchanged. SAME, by id(q): the very tensors of an earlier call, unchanged since.
`paged_attention` (kernels/attention.py) uses FAST only, with its start offsets' properties
read every call; decode's keys have None in their place, so the two never share an entry.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from typing import Any

import torch

# "Unchanged" is judged by identity and version counter: every in-place op bumps the counter,
# the metadata ones (resize_, as_strided_, set_, transpose_, ...) included. Two things replace
# a tensor's properties without bumping it, `t.data = other` and `torch.utils.swap_tensors`:
# after either, call `clear_launch_cache()`. Identity is safe against reused ids: _KV, _TABLES
# entries hold weak references, and a SAME entry leaves as soon as any of its tensors dies, so a
# live entry's ids can only be its own tensors'.
Launch = Callable[..., torch.Tensor]
SAME: dict[int, tuple[Any, ...]] = {}  # id(q) -> (ids and versions, launch, refs, FAST state)
FAST: dict[tuple[object, ...], tuple[Any, ...]] = {}  # fast_key -> (launch, [id(q), cooldown])
LAST: list[Any] = [None, None]  # the last FAST hit's key and entry (no hashing for a repeat)
_KV: dict[int, tuple[Any, ...]] = {}  # id(k) -> (ref k, version, ref v, version, number)
_TABLES: dict[int, tuple[Any, ...]] = {}  # the same for (block tables, context lengths)
_NUMBERS: dict[tuple[object, ...], int] = {}  # properties -> number (never reused)
_COUNTER = itertools.count(1)
MAX_BOUND = 512
# A FAST entry enters SAME when the same q came twice in a row, and not for the next COOLDOWN
# FAST hits after a SAME miss or after a promoted q died (fresh views whose ids repeat).
COOLDOWN = 64


def clear() -> None:
    for cache in (SAME, FAST, _KV, _TABLES, _NUMBERS):
        cache.clear()
    LAST[:] = [None, None]


def _hold(a: torch.Tensor, b: torch.Tensor, held: dict[int, tuple[Any, ...]], rows: bool
          ) -> int:
    """Read the pair's properties (shape, only its rows for block tables; strides, dtype,
    device of each), number them (equal properties, equal numbers) and remember the pair."""
    shape = a.shape
    props = (shape[:1] if rows else shape, a.stride(), a.dtype, a.device, b.shape, b.stride(),
             b.dtype, b.device)
    number = _NUMBERS.get(props)
    if number is None:
        if len(_NUMBERS) >= MAX_BOUND:
            _NUMBERS.clear()
        number = _NUMBERS[props] = next(_COUNTER)
    try:
        versions = a._version, b._version
    except RuntimeError:  # inference-mode tensors have no version counter: never remembered
        return number
    if len(held) >= MAX_BOUND:
        held.clear()
    held[id(a)] = (weakref.ref(a), versions[0], weakref.ref(b), versions[1], number)
    return number


def fast_key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor,
             lens: torch.Tensor, out: torch.Tensor, sinks: torch.Tensor | None,
             opts: tuple[object, ...], starts: torch.Tensor | None = None
             ) -> tuple[object, ...]:
    """Every property the checks read (tables: all but their width, which no check reads).
    The pairs' numbers come from _KV / _TABLES while both tensors are unchanged; sinks' and
    the start offsets' properties (None for decode) are read every call, as q's are."""
    e = _KV.get(id(k))
    kv = e[4] if (e is not None and e[0]() is k and e[2]() is v and e[1] == k._version
                  and e[3] == v._version) else _hold(k, v, _KV, False)
    e = _TABLES.get(id(tables))
    tl = e[4] if (e is not None and e[0]() is tables and e[2]() is lens
                  and e[1] == tables._version and e[3] == lens._version) \
        else _hold(tables, lens, _TABLES, True)
    return (q.shape, q.stride(), q.dtype, q.device, out.shape, out.stride(), out.dtype,
            out.device, kv, tl,
            None if sinks is None else (sinks.shape, sinks.stride(), sinks.dtype, sinks.device),
            None if starts is None else (starts.shape, starts.stride(), starts.dtype,
                                         starts.device), opts)


def find(key: tuple[object, ...]) -> tuple[Any, ...] | None:
    """FAST's entry for `key`, or None. The last hit's key is compared first, so the layers
    of a step, which share one, skip hashing it."""
    if key == LAST[0]:
        return LAST[1]  # type: ignore[no-any-return]
    found = FAST.get(key)
    if found is not None:
        LAST[0], LAST[1] = key, found
    return found


def _ident(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: torch.Tensor,
           n: torch.Tensor, o: torch.Tensor | None, s: torch.Tensor | None,
           opts: tuple[object, ...]) -> tuple[object, ...]:
    """Ids and versions of the tensors (q's id is SAME's key), and the options. Raises
    RuntimeError for inference-mode tensors, which have no version counter."""
    return (q._version, id(k), k._version, id(v), v._version, id(t), t._version, id(n),
            n._version, None if o is None else (id(o), o._version),
            None if s is None else (id(s), s._version), opts)


def same_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: torch.Tensor,
                n: torch.Tensor, o: torch.Tensor | None, s: torch.Tensor | None,
                opts: tuple[object, ...]) -> Launch | None:
    """The launch of these very tensors, unchanged, or None (dropping a stale entry); call it
    only for an id(q) in SAME."""
    e = SAME[id(q)]
    if _ident(q, k, v, t, n, o, s, opts) == e[0]:
        return e[1]  # type: ignore[no-any-return]
    del SAME[id(q)]
    e[3][1] = COOLDOWN
    return None


def promote(tensors: tuple[torch.Tensor | None, ...], opts: tuple[object, ...],
            found: tuple[Any, ...]) -> None:
    """Enter SAME (a FAST hit of the same q twice in a row, no cooldown left)."""
    q, k, v, t, n, o, s = tensors
    state, qid = found[1], id(q)
    try:
        ident = _ident(q, k, v, t, n, o, s, opts)  # type: ignore[arg-type]
    except RuntimeError:
        state[1] = COOLDOWN
        return
    if len(SAME) >= MAX_BOUND:
        SAME.clear()
    forget = lambda ref: _forget(qid, ref)
    refs = tuple(weakref.ref(x, forget) for x in tensors if x is not None)
    SAME[qid] = (ident, found[0], refs, state)


def _forget(qid: int, ref: weakref.ref) -> None:
    """A tensor of q's SAME entry died: drop the entry (if still that one) and promote
    nothing for a while, since the next views may well get q's id again."""
    e = SAME.get(qid)
    if e is not None and any(r is ref for r in e[2]):
        del SAME[qid]
        e[3][1] = COOLDOWN


def remember(key: tuple[object, ...], launch: Launch, q: torch.Tensor) -> None:
    if len(FAST) >= MAX_BOUND:
        FAST.clear()
    FAST[key] = (launch, [id(q), 0])
