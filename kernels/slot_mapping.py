"""Compute slot ids for a batch of new tokens on the device, from block tables.

The new tokens of sequence `s` are packed at `query_start_loc[s] .. query_start_loc[s+1]` and
sit at the end of its context, so token `i` of `n` new tokens has position
`context_lens[s] - n + i`:

    position p  ->  block_tables[s][p // block_size] * block_size + p % block_size

Entries of the output beyond the packed tokens (graph padding) are -1, which
reshape_and_cache skips.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from kernels.launch import as_block_tables, as_int_tensor, for_device

BLOCK_T = 128


@triton.jit
def _slot_mapping_kernel(
    slot_ptr,  # [num_tokens] int64
    block_tables_ptr,  # [num_seqs, max_blocks] int32
    query_start_loc_ptr,  # [num_seqs + 1]
    context_lens_ptr,  # [num_seqs]
    stride_bt,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    seq = tl.program_id(0)
    q_start = tl.load(query_start_loc_ptr + seq)
    num_new = tl.load(query_start_loc_ptr + seq + 1) - q_start
    first_pos = tl.load(context_lens_ptr + seq) - num_new
    offs = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    mask = offs < num_new
    pos = first_pos + offs
    block_id = tl.load(block_tables_ptr + seq * stride_bt + pos // BLOCK_SIZE, mask=mask, other=0)
    slot = block_id.to(tl.int64) * BLOCK_SIZE + pos % BLOCK_SIZE
    tl.store(slot_ptr + q_start + offs, slot, mask=mask)


def compute_slot_mapping(
    block_tables: torch.Tensor | Sequence[Sequence[int]],
    query_start_loc: torch.Tensor | Sequence[int],
    context_lens: torch.Tensor | Sequence[int],
    block_size: int,
    *,
    num_tokens: int | None = None,
    max_new_tokens: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Return int64 slot ids `[num_tokens]` for the packed new tokens of every sequence.

    Args:
        block_tables: per-sequence block ids (list of lists or int32 `[num_seqs, max_blocks]`).
        query_start_loc: `[num_seqs + 1]` offsets of each sequence's new tokens.
        context_lens: `[num_seqs]` total tokens per sequence including the new ones.
        block_size: tokens per block.
        num_tokens: output length (>= total new tokens; the rest is -1). Default: the total.
        max_new_tokens: largest new-token count (avoids a device sync when given).
        device: where to compute; default the block tables' device, else CPU.

    Raises:
        ValueError: on inconsistent lengths.
    """
    if device is None:
        device = (
            block_tables.device if isinstance(block_tables, torch.Tensor) else torch.device("cpu")
        )
    device = torch.device(device)
    tables = as_block_tables(block_tables, device)
    starts = as_int_tensor(query_start_loc, device, "query_start_loc")
    lens = as_int_tensor(context_lens, device, "context_lens")
    num_seqs = lens.numel()
    if starts.numel() != num_seqs + 1 or tables.shape[0] != num_seqs:
        raise ValueError(
            f"slot mapping: {num_seqs} context lengths, {starts.numel()} start offsets, "
            f"{tables.shape[0]} block tables"
        )
    total = int(starts[-1].item()) if num_tokens is None else num_tokens
    slots = torch.full((total,), -1, dtype=torch.int64, device=device)
    if num_seqs == 0 or total == 0:
        return slots
    if max_new_tokens is None:
        max_new_tokens = int((starts[1:] - starts[:-1]).max().item())
    grid = (num_seqs, triton.cdiv(max(max_new_tokens, 1), BLOCK_T))
    for_device(_slot_mapping_kernel, device)[grid](
        slots,
        tables,
        starts,
        lens,
        tables.stride(0),
        BLOCK_SIZE=block_size,
        BLOCK_T=BLOCK_T,
    )
    return slots
