"""KVarN's fp16 pool bookkeeping on the device: which physical block holds a pool slot, what to flush.

The rules are the part-1 two-tier rules (``ops/kvarn/tiers.py``: ``TwoTierBook`` is the reference this
module is tested against); this is the same bookkeeping as tensor operations keyed by *physical block
id* instead of Python dicts keyed by request id, because inside vLLM 0.29 (Model Runner V2):

- the attention metadata carries block tables, sequence lengths and query offsets as device tensors,
  not request ids; under async scheduling with speculative decoding the CPU only has an upper bound of
  the sequence lengths, so the exact ``committed = seq_len - query_len`` exists only on the device;
- a plan built from tensors needs no host synchronization, so it also runs inside a CUDA graph.

Rules (specs/kvarn.md, "Two tiers"):

- a token is written, rotated, into the pool slot of its block; a block gets a slot when the first of
  this step's tokens lands in it and has none;
- a block other than logical block 0 of its request is flushed (compressed into the cache, its slot
  freed) once all its tokens are committed; logical block 0 (the sink) keeps its slot until the
  request ends;
- when a request ends (or is preempted) the runner passes its block ids to :meth:`release`.

No vLLM import: the module runs on the CPU in CI, on a bare GPU machine, and inside vLLM.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = ["KVarNSlotTable", "SlotPlan", "pool_slots_needed"]


def pool_slots_needed(
    max_num_seqs: int, max_num_batched_tokens: int, group: int, max_query_len: int = 1
) -> int:
    """Slots that can never run out (one slot holds one block of G tokens for all KV heads).

    After a step's flush a request holds: its sink (1); the blocks its q uncommitted tokens lie in,
    at most ceil((q - 1) / G) + 1 <= q / G + 2; and, with speculative decoding, blocks left beyond
    its sequence by last step's rejected drafts, at most ceil((max_query_len - 1) / G). Summed over
    requests, with sum(q) <= max_num_batched_tokens:
    ``max_num_seqs * (3 + ceil((max_query_len - 1) / G)) + ceil(max_num_batched_tokens / G)``.
    """
    if min(max_num_seqs, max_num_batched_tokens, group, max_query_len) < 1:
        raise ValueError(
            f"max_num_seqs={max_num_seqs}, max_num_batched_tokens={max_num_batched_tokens}, "
            f"group={group}, max_query_len={max_query_len}: all must be >= 1"
        )
    per_request = 3 + math.ceil((max_query_len - 1) / group)
    return max_num_seqs * per_request + math.ceil(max_num_batched_tokens / group)


class SlotPlan(NamedTuple):
    """One step's plan; every tensor lives on the table's device, fixed shapes, -1 = nothing."""

    flush_blocks: torch.Tensor  # int64 [R * W]: physical blocks to compress this step, or -1
    flush_slots: torch.Tensor  # int64 [R * W]: their pool slots, or -1
    write_slots: torch.Tensor  # int64 [T]: pool slot each new token is written to, or -1 (padding)
    write_rows: torch.Tensor  # int64 [T]: row inside the slot (position mod G)
    committed: torch.Tensor  # int64 [R]: seq_len - query_len
    # int32 [num_slots]: the block to compress from slot s this step, or -1. The same flushes as
    # (flush_slots, flush_blocks), by slot: a flush frees a distinct slot, and at most num_slots
    # blocks are resident, so this fixed-size list is what a launch reads without a host sync (the
    # R * W lists would cost a program per block of every request's table).
    flush_by_slot: torch.Tensor


class KVarNSlotTable:
    """Pool-slot ownership of one KV-cache group (all its layers share block ids, hence slots)."""

    def __init__(
        self, num_blocks: int, num_slots: int, group: int, device: torch.device | str = "cpu"
    ) -> None:
        if num_blocks < 1 or num_slots < 1 or group < 1:
            raise ValueError(
                f"num_blocks={num_blocks}, num_slots={num_slots}, group={group}: all must be >= 1"
            )
        self.num_blocks = num_blocks
        self.num_slots = num_slots
        self.group = group
        self.device = torch.device(device)
        # One extra trailing entry in each table takes the writes of masked-out lanes, so every
        # update is a plain scatter with fixed shapes (no boolean indexing, no host sync).
        self.block_slot = torch.full((num_blocks + 1,), -1, dtype=torch.int32, device=self.device)
        self.slot_block = torch.full((num_slots + 1,), -1, dtype=torch.int32, device=self.device)

    @property
    def decode_view(self) -> torch.Tensor:
        """``block_slot`` [num_blocks] as the decode kernels read it: slot, or -1 when compressed."""
        return self.block_slot[: self.num_blocks]

    def resident_blocks(self) -> set[int]:
        """Physical blocks holding a slot (host copy: tests and diagnostics only)."""
        return {int(b) for b in torch.nonzero(self.decode_view >= 0).flatten().tolist()}

    def _scatter(self, table: torch.Tensor, index: torch.Tensor, value: torch.Tensor, mask):
        trash = table.shape[0] - 1
        table.index_put_((torch.where(mask, index, trash),), value.to(table.dtype))

    def plan(
        self,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        query_start_loc: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> SlotPlan:
        """Decide this step's flushes and slot allocations, and apply them to the tables.

        ``block_table`` [R, W] and ``slot_mapping`` [T] are in kernel-block units (block id · G +
        row; the KVarN kernel block is the tile, G tokens); ``seq_lens`` [R] counts this step's
        tokens; ``query_start_loc`` [R + 1]. Padded requests have seq_len 0, padded tokens a
        negative slot. The caller compresses ``flush_slots`` into ``flush_blocks`` before it writes
        any token of this step into the pool: a freed slot may be handed to a new block at once.
        """
        g = self.group
        r, w = block_table.shape
        dev = self.device
        blocks = block_table.to(device=dev, dtype=torch.int64).clamp(0, self.num_blocks - 1)
        qsl = query_start_loc.to(device=dev, dtype=torch.int64)
        query_lens = qsl[1 : r + 1] - qsl[:r]
        committed = (seq_lens[:r].to(device=dev, dtype=torch.int64) - query_lens).clamp_min(0)

        # 1. Flush: every resident non-sink block whose tokens are all committed.
        logical = torch.arange(w, device=dev, dtype=torch.int64)
        full = (logical[None, :] >= 1) & ((logical[None, :] + 1) * g <= committed[:, None])
        slot_of = self.block_slot[blocks].to(torch.int64)
        flush = full & (slot_of >= 0)
        flush_blocks = torch.where(flush, blocks, -1).flatten()
        flush_slots = torch.where(flush, slot_of, -1).flatten()
        fmask = flush_slots >= 0
        flush_by_slot = torch.full((self.num_slots + 1,), -1, dtype=torch.int32, device=dev)
        self._scatter(flush_by_slot, flush_slots, flush_blocks, fmask)
        self._scatter(self.slot_block, flush_slots, torch.full_like(flush_slots, -1), fmask)
        self._scatter(self.block_slot, flush_blocks, torch.full_like(flush_blocks, -1), fmask)

        # 2. Allocate: the first of this step's tokens in a block without a slot takes a free one.
        sm = slot_mapping.to(device=dev, dtype=torch.int64)
        valid = sm >= 0
        tok_block = torch.where(valid, sm // g, self.num_blocks)  # trash entry for padding
        rows = torch.where(valid, sm % g, 0)
        prev = torch.cat([torch.full((1,), -2, dtype=torch.int64, device=dev), tok_block[:-1]])
        first = valid & (tok_block != prev)
        need = first & (self.block_slot[tok_block] < 0)
        rank = torch.cumsum(need.to(torch.int64), 0) - 1
        free = self.slot_block[: self.num_slots] < 0
        # Free slots first, lowest id first (stable sort on "taken").
        order = torch.sort((~free).to(torch.int8), stable=True).indices.to(torch.int64)
        num_free = free.sum()
        # Sized by pool_slots_needed this cannot fire; if it does, stop loudly rather than let two
        # blocks share a slot. On CUDA this is a device-side assert (no host sync).
        torch._assert_async(
            (rank.max() if rank.numel() else torch.zeros((), device=dev, dtype=torch.int64))
            < num_free
        )
        new_slot = order[rank.clamp(0, self.num_slots - 1)]
        self._scatter(self.block_slot, tok_block, new_slot, need)
        self._scatter(self.slot_block, new_slot, tok_block, need)

        write_slots = torch.where(valid, self.block_slot[tok_block].to(torch.int64), -1)
        return SlotPlan(
            flush_blocks,
            flush_slots,
            write_slots,
            torch.where(valid, rows, 0),
            committed,
            flush_by_slot[: self.num_slots],
        )

    def release(self, blocks: torch.Tensor) -> None:
        """A request ended or was preempted: free the slots of its physical blocks (sink included)."""
        if blocks.numel() == 0:
            return
        b = blocks.to(device=self.device, dtype=torch.int64).flatten()
        ok = (b >= 0) & (b < self.num_blocks)
        b = torch.where(ok, b, self.num_blocks)
        s = self.block_slot[b].to(torch.int64)
        held = ok & (s >= 0)
        self._scatter(self.slot_block, s, torch.full_like(s, -1), held)
        self._scatter(self.block_slot, b, torch.full_like(b, -1), held)
