"""sim/sched/tally.py: the fast path's per-manager rules, checked against the managers."""
from __future__ import annotations

from allocator.interface import ManagerConfig
from allocator.registry import make_manager
from sim.sched.tally import ContiguousTally, PagedTally, snapshot_row
from sim.workload.sequence import Seq
from sim.workload.workload import Workload
from tests.unit.simkit import make_trace, run_config


def _seq(prompt: int, output: int) -> Seq:
    workload = Workload(make_trace([(0.0, prompt, output)]), run_config(), None)
    (seq,) = workload.first_seqs(workload.make_group(0), split=False)
    return seq


def test_paged_next_call_is_the_next_new_block_or_filled_block() -> None:
    """Block size 16: after computing up to 21 tokens a request holds 32 slots; with caching
    its next call fills block 1 (position 31), without caching it is the next new block."""
    for caching, call_at in ((True, 31), (False, 32)):
        manager = make_manager("paged", ManagerConfig(num_gpu_blocks=64, block_size=16,
                                                      max_model_len=256,
                                                      enable_caching=caching))
        tally = PagedTally(manager, 16, 256)
        seq = _seq(20, 10)
        seq.req.num_computed_tokens = 20
        tally.allocated(seq, 1)
        assert (seq.held, seq.call_at) == (32, call_at)
        assert tally.held_slots == 32 and tally.ceiling == 29  # final length 20 + 10 - 1
        tally.freed(seq)
        assert tally.held_slots == tally.ceiling == 0


def test_contiguous_deferred_calls_are_replayed_exactly() -> None:
    """A steady sequence's skipped calls: the corrected snapshot equals the manager's once
    the last call is replayed, which leaves the manager as the calls would have."""
    manager = make_manager("oracle", ManagerConfig(num_gpu_blocks=64, block_size=16,
                                                   max_model_len=256))
    seq = _seq(20, 10)
    req = seq.req
    assert manager.allocate_slots(req, 20) is not None
    req.num_computed_tokens = 20
    seq.num_out = 1
    seq.flush()
    tally = ContiguousTally(manager)
    tally.slept(seq, 20)
    ahead = tally.snapshot(0, 25)  # five steady steps later, nothing called
    seq.num_out = 6
    tally.woken(seq, 25)
    assert ahead == snapshot_row(manager.memory_snapshot())
    assert snapshot_row(manager.memory_snapshot())[0] == 25 and tally.behind == 0
