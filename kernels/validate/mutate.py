"""Seeded mutations of an allocation log, to prove the attention comparison catches bad tables.

Each mutation changes what the kernels see in one validated step, the way an allocator bug
would, while the slot check is switched off so that only the attention comparison can notice:

- `table`: one block-table entry inside the attended range points at another live block (one
  in another scheduled sequence's table) whose shadow says it holds different tokens;
- `copy`: one copy-on-write copy of the plan is dropped (its destination is read this step);
- `slot`: one new token's slot moves by one within its block.

The target is the `k`-th eligible step, `k = Random(seed).randrange(within)`; the choice
inside that step is seeded too. `applied` describes what was changed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kernels.validate.log import SeqRecord, StepRecord
from kernels.validate.ops import attended_from
from kernels.validate.state import Replay

KINDS = ("table", "copy", "slot")


@dataclass(frozen=True, slots=True)
class Mutation:
    """What to break: `kind` in KINDS, a seed, and how many eligible steps to choose among."""

    kind: str
    seed: int = 0
    within: int = 4

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"mutation kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.within < 1:
            raise ValueError("mutation 'within' must be >= 1")

    @classmethod
    def parse(cls, text: str) -> Mutation:
        """`KIND[:SEED[:WITHIN]]`, e.g. `table:3` or `copy:0:1`."""
        parts = text.split(":")
        try:
            nums = [int(p) for p in parts[1:3]]
        except ValueError:
            raise ValueError(f"--mutate {text!r}: expected KIND[:SEED[:WITHIN]]") from None
        return cls(parts[0], *nums)


class Mutator:
    """Applies one `Mutation` to the replay, at the step it picks."""

    def __init__(self, mutation: Mutation) -> None:
        self.mutation = mutation
        self.rng = random.Random(mutation.seed)
        self.target = self.rng.randrange(mutation.within)
        self.seen = 0
        self.applied: str | None = None

    def _due(self, eligible: bool) -> bool:
        if self.applied is not None or not eligible:
            return False
        self.seen += 1
        return self.seen - 1 == self.target

    def before_moves(self, rec: StepRecord, block_size: int) -> None:
        """`copy` and `slot` mutations change the record before copies and writes run."""
        kind = self.mutation.kind
        if kind == "copy":
            held = {b for s in rec.seqs for b in s.block_table}
            picks = [i for i, (_, dst) in enumerate(rec.copies) if dst in held]
            if self._due(bool(picks)):
                i = self.rng.choice(picks)
                self.applied = f"step {rec.step}: dropped copy {rec.copies[i]}"
                del rec.copies[i]
        elif kind == "slot":
            seqs = [s for s in rec.seqs if s.num_new > 0]
            if self._due(bool(seqs)):
                s = self.rng.choice(seqs)
                j = self.rng.randrange(s.num_new)
                slot = s.slot_mapping[j]
                moved = slot + 1 if (slot + 1) % block_size else slot - 1
                s.slot_mapping[j] = moved
                self.applied = (f"step {rec.step}: request {s.request_id} position "
                                f"{s.start + j} slot {slot} -> {moved}")

    def before_attention(self, rp: Replay, rec: StepRecord, window: int | None) -> None:
        """`table` mutations change the table the kernels read, after the step's writes."""
        if self.mutation.kind != "table":
            return
        picks = self._table_picks(rp, rec, window)
        if self._due(bool(picks)):
            s, i, other = self.rng.choice(picks)
            self.applied = (f"step {rec.step}: request {s.request_id} table[{i}] "
                            f"{s.block_table[i]} -> {other}")
            s.block_table[i] = other

    def _table_picks(self, rp: Replay, rec: StepRecord, window: int | None
                     ) -> list[tuple[SeqRecord, int, int]]:
        bs = rp.block_size
        picks = []
        for s in rec.seqs:
            live = sorted({b for o in rec.seqs if o is not s for b in o.block_table} - {0})
            lo = attended_from(s, window) // bs
            for i in range(lo, -(-s.end // bs)):
                mine = rp.shadow[s.block_table[i] * bs:(s.block_table[i] + 1) * bs]
                used = min(bs, s.end - i * bs)
                for b in live:
                    theirs = rp.shadow[b * bs:(b + 1) * bs]
                    if b != s.block_table[i] and (mine[:used] != theirs[:used]).any():
                        picks.append((s, i, b))
                        break
        return picks
