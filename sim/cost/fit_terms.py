"""The terms of the fitted step model, and their least-squares fit.

Per part p (attention, linear, other) and step kind k (decode, prefill, mixed), seconds:

    t = floor[k,p] x launches_p + mem[k,p] x M_p + flop[k,p] x F_p + seq[k,p] x S
        + waves[k,p] x W + bound[k,p] x max(M_p, F_p) + expert[k,p] x X_p

M_p and F_p are the roofline's memory and compute seconds of the part at 100 % of the GPU's
datasheet HBM bandwidth and tensor peak (sim/cost/step_roofline.py), so 1 / mem and 1 / flop
are the part's efficiencies; `launches_p` counts the part's kernel launches per step, so
`floor` is a latency floor per launch; `seq` a cost per scheduled sequence. `bound` prices the
part at its roofline (the slower of memory and compute), so a part that turns from memory- to
compute-bound as tokens grow is not charged both. W (attention of prefill and mixed steps
only) counts the key tiles on the critical path of the query-tile kernel (`tile_waves`): a
short chunk over a long cached prefix leaves most SMs idle while a few programs walk the
whole prefix, which no FLOP or byte count sees; `waves` is seconds per key tile of one program.
X (the linear part of MoE models only) is the seconds of reading the routed experts a step
touches at 100 % of HBM bandwidth, and M_linear then counts the other linear bytes: grouped
expert GEMMs read their weights at about half the bandwidth dense GEMMs reach (Mixtral-8x7B
and Qwen3-30B-A3B on the H200), so one `mem` for both priced an MoE model no fit had seen
30-50 % too fast (benchmarks/RESULTS.md, "Routed experts' reads as their own term").
The "other" part (norms, rotary, activation, MoE glue, embedding, argmax) has M = the bytes of
about ten activation vectors per token and layer, and no FLOP term; neither has decode
attention (its query-key pairs equal the keys it reads, so the two cannot be told apart), and
neither has `bound`. Linear rows are the tokens padded to vLLM's CUDA-graph capture sizes (as
the executor runs them). Coefficients are non-negative, fitted by least squares on relative
error (each row divided by its measured time): an exact search over the subsets of active
terms (7 terms: 127 small numpy solves; a column that is zero throughout, as `expert` for a
dense model, gets 0).
"""
from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

import numpy as np

from sim.cost.model_config import ModelConfig
from sim.cost.step_roofline import RooflineStepModel

PARTS = ("attention", "linear", "other")
KINDS = ("decode", "prefill", "mixed")
TERMS = ("floor", "mem", "flop", "seq", "waves", "bound", "expert")
MAX_CAPTURE_SIZE = 512
# vLLM's default capture sizes: [1, 2, 4] + range(8, 256, 8) + range(256, 513, 16).
CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, MAX_CAPTURE_SIZE + 1, 16))
OTHER_VECTORS_PER_LAYER = 10
# kernels/attention.py: chunks of more than 16 new tokens run as query-tile programs (one per
# BLOCK_M new tokens and query head, heaviest first), the rest as split-K items like decodes.
SPLIT_K_MAX_NEW = 16
# Query-tile programs resident per SM. 2 fits the executed prefill points better than 1 or 3
# (on the fitted split of every shape; benchmarks/RESULTS.md, "prefill tail").
PROGRAMS_PER_SM = 2


def prefill_tile(head_dim: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of the query-tile programs for 16-bit q (kernels/prefill_config.py)."""
    return (128, 64) if head_dim <= 128 else (64, 32)


def tile_waves(prefills: Sequence[tuple[int, int]], heads: int, head_dim: int, sms: int,
               window: int | None) -> int:
    """Key tiles on the critical path of one layer's query-tile programs: the programs (one
    per query tile and query head, heaviest first) run in waves of PROGRAMS_PER_SM x `sms`,
    each wave lasting as long as its heaviest program; the sum of those programs' key tiles.
    A tile of new tokens [s, e) of a chunk over `prefix` cached tokens reads prefix + e keys
    (at most window + BLOCK_M under a sliding window), in tiles of BLOCK_N."""
    block_m, block_n = prefill_tile(head_dim)
    tiles = []
    for new, prefix in prefills:
        if new <= SPLIT_K_MAX_NEW:
            continue
        for end in range(block_m, new + block_m, block_m):
            keys = prefix + min(end, new)
            if window is not None:
                keys = min(keys, window + block_m)
            tiles.append(-(-keys // block_n))
    tiles.sort(reverse=True)
    slots = PROGRAMS_PER_SM * sms
    return sum(tiles[j // heads] for j in range(0, len(tiles) * heads, slots))


def padded_tokens(tokens: int) -> int:
    """Rows through the linear layers: the next capture size, or `tokens` above them all."""
    if tokens > MAX_CAPTURE_SIZE:
        return tokens
    return CAPTURE_SIZES[bisect.bisect_left(CAPTURE_SIZES, tokens)]


def linear_rows(num_decode: int, prefills: Sequence[tuple[int, int]]) -> int:
    """Rows a step's linear layers run: its new tokens, padded (`padded_tokens`)."""
    return padded_tokens(num_decode + sum(new for new, _ in prefills))


def step_kind(num_decode: int, num_prefill: int) -> str:
    return "mixed" if num_decode and num_prefill else ("decode" if num_decode else "prefill")


def launches(model: ModelConfig, kind: str) -> tuple[int, int, int]:
    """Kernel launches per step of (attention, linear, other), as the executed forward runs
    them (kernels/execute/forward.py): cache write plus one or two attention kernels; QKV, O
    and the MLP's GEMMs (MoE: router and two grouped GEMMs) plus the LM head; two norms,
    rotary and activation (Q/K norm, MoE routing glue) plus embedding, final norm, argmax."""
    layers = model.num_layers
    attention = layers * (2 if kind != "mixed" else 3)
    linear = layers * (5 if model.moe else (4 if model.gated_mlp else 3)) + 1
    other = layers * (4 + model.qk_norm + 4 * model.moe) + 3
    return attention, linear, other


def features(roof: RooflineStepModel, num_decode: int, sum_decode_context: int,
             prefills: Sequence[tuple[int, int]]) -> tuple[str, list[list[float]]]:
    """The step's kind and, per part, the values of TERMS (see the module docstring)."""
    kind = step_kind(num_decode, len(prefills))
    seqs = num_decode + len(prefills)
    tokens, keys, pairs = roof.batch_sums(num_decode, sum_decode_context, prefills)
    rows = padded_tokens(tokens)
    att_mem, att_flop = roof.attention_terms(tokens, keys, pairs)
    lin_mem, lin_flop = roof.linear_terms(rows, seqs)
    model = roof.model
    other_mem = (rows * model.num_layers * OTHER_VECTORS_PER_LAYER * model.hidden_size
                 * model.dtype_bytes / roof.gpu.hbm_bytes_per_s)
    n_att, n_lin, n_other = launches(model, kind)
    waves, att_bound = 0.0, max(att_mem, att_flop)
    if kind == "decode":
        att_flop = att_bound = 0.0  # a decode's pairs equal its keys read: not separable
    else:
        waves = float(model.num_layers * tile_waves(
            prefills, model.heads_per_gpu(roof.tp), model.head_dim, roof.gpu.sms, roof.window))
    expert = roof.expert_memory(rows)
    return kind, [[n_att, att_mem, att_flop, seqs, waves, att_bound, 0.0],
                  [n_lin, lin_mem - expert, lin_flop, seqs, 0.0, max(lin_mem, lin_flop), expert],
                  [n_other, other_mem, 0.0, seqs, 0.0, 0.0, 0.0]]


def fit_nonnegative(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Coefficients c >= 0 minimising sum(((x @ c) / y - 1)^2): the best unconstrained fit
    over every subset of columns whose solution is non-negative."""
    scaled = x / y[:, None]
    ones = np.ones(len(y))
    best, best_err = np.zeros(x.shape[1]), float(len(y))
    for size in range(1, x.shape[1] + 1):
        for cols in itertools.combinations(range(x.shape[1]), size):
            sub = scaled[:, cols]
            if not sub.any():
                continue
            coef, *_ = np.linalg.lstsq(sub, ones, rcond=None)
            if (coef < 0).any():
                continue
            err = float(((sub @ coef - ones) ** 2).sum())
            if err < best_err:
                best = np.zeros(x.shape[1])
                best[list(cols)] = coef
                best_err = err
    return best
