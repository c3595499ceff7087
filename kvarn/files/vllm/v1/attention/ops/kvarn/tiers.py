"""The two-tier bookkeeping: which blocks live in the fp16 pool and when a block is flushed.

Pure Python (no torch), so the vLLM backend reuses it as is and the rules are tested on the CPU.

Rules (specs/kvarn.md, "Two tiers"):
- every new token is first written, rotated, to an fp16 pool slot (one slot holds one block: G tokens
  × KV heads × D); a logical block gets a slot the first time a token lands in it;
- a block is flushed (normalized, quantized, packed into the compressed cache) only when all of its
  tokens are committed, committed = seq_len − query_len, so speculative tokens never reach it;
- logical block 0 of every request is the attention sink: it keeps its slot for the request's
  lifetime and is never flushed.

The caller runs the store kernel for ``StepPlan.flush`` and then calls :meth:`TwoTierBook.flushed`,
which frees the slots; the decode kernel reads a block from the pool while ``block_slot[phys] >= 0``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

SINK_BLOCK = 0


class KVarNPoolError(RuntimeError):
    """The fp16 pool is exhausted or a request is used inconsistently; the message says which."""


@dataclass(frozen=True)
class BlockRef:
    logical: int  # block index inside the request
    physical: int  # block id in the KV cache (from the block table)
    slot: int  # fp16 pool slot


@dataclass(frozen=True)
class StepPlan:
    request: str
    committed: int  # tokens whose K/V are final
    allocate: tuple[
        BlockRef, ...
    ]  # blocks that got a pool slot this step (set block_slot[phys] = slot)
    flush: tuple[BlockRef, ...]  # blocks to compress now, then free (block_slot[phys] = -1)


@dataclass
class _Request:
    slots: dict[int, BlockRef] = field(default_factory=dict)  # logical -> ref, pool-resident blocks
    flushed: set[int] = field(default_factory=set)
    pending_flush: set[int] = field(default_factory=set)


class TwoTierBook:
    """Slot allocation and flush decisions for every running request of one layer group."""

    def __init__(self, num_slots: int, block_size: int) -> None:
        if num_slots < 1 or block_size < 1:
            raise KVarNPoolError(
                f"num_slots={num_slots}, block_size={block_size}: both must be >= 1"
            )
        self.num_slots = num_slots
        self.block_size = block_size
        # Lowest slot first: keeps the pool's used prefix dense, which helps debugging and locality.
        self._free: list[int] = list(range(num_slots - 1, -1, -1))
        self._requests: dict[str, _Request] = {}

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def _take(self, request: str) -> int:
        if not self._free:
            raise KVarNPoolError(
                f"request {request!r}: the KVarN fp16 pool ({self.num_slots} slots of "
                f"{self.block_size} tokens) is exhausted; raise the pool size or lower "
                "max_num_batched_tokens"
            )
        return self._free.pop()

    def step(
        self, request: str, block_ids: Sequence[int], seq_len: int, query_len: int
    ) -> StepPlan:
        """Plan one step: slots for the blocks the ``query_len`` new tokens land in, and flushes.

        ``seq_len`` counts the new tokens; ``block_ids`` is the request's block-table row (physical
        ids of its logical blocks, at least ceil(seq_len / G) of them).
        """
        if not 0 <= query_len <= seq_len:
            raise KVarNPoolError(f"request {request!r}: query_len={query_len}, seq_len={seq_len}")
        g = self.block_size
        need = -(-seq_len // g)
        if len(block_ids) < need:
            raise KVarNPoolError(
                f"request {request!r}: seq_len={seq_len} needs {need} blocks, the table has "
                f"{len(block_ids)}"
            )
        req = self._requests.setdefault(request, _Request())
        committed = seq_len - query_len
        allocate: list[BlockRef] = []
        for logical in range(committed // g, need):
            if logical in req.flushed:
                raise KVarNPoolError(
                    f"request {request!r}: a token at position >= {committed} lands in block "
                    f"{logical}, which was already flushed (committed tokens went backwards?)"
                )
            if logical not in req.slots:
                ref = BlockRef(logical, int(block_ids[logical]), self._take(request))
                req.slots[logical] = ref
                allocate.append(ref)
        flush = [
            ref
            for logical, ref in sorted(req.slots.items())
            if logical != SINK_BLOCK
            and (logical + 1) * g <= committed
            and logical not in req.pending_flush
        ]
        req.pending_flush.update(ref.logical for ref in flush)
        return StepPlan(request, committed, tuple(allocate), tuple(flush))

    def flushed(self, request: str, refs: Sequence[BlockRef]) -> None:
        """The store kernel wrote these blocks: free their slots."""
        req = self._requests[request]
        for ref in sorted(refs, key=lambda r: r.logical):
            if req.slots.get(ref.logical) != ref:
                raise KVarNPoolError(f"request {request!r}: block {ref} is not pool-resident")
            # The decode kernel relies on the compressed blocks being exactly [1, compressed_end).
            if ref.logical != 1 + len(req.flushed):
                raise KVarNPoolError(
                    f"request {request!r}: block {ref.logical} flushed out of order (blocks "
                    f"1..{len(req.flushed)} are compressed); flush every planned block, in order"
                )
            del req.slots[ref.logical]
            req.pending_flush.discard(ref.logical)
            req.flushed.add(ref.logical)
            self._free.append(ref.slot)

    def compressed_end(self, request: str) -> int:
        """Blocks [1, compressed_end) of the request are compressed; 0 and the rest are pooled."""
        req = self._requests.get(request)
        return 1 + (len(req.flushed) if req else 0)

    def resident(self, request: str) -> dict[int, BlockRef]:
        """logical block -> ref, for the request's pool-resident blocks (sink included)."""
        req = self._requests.get(request)
        return dict(req.slots) if req else {}

    def slot_of_position(self, request: str, position: int) -> tuple[int, int]:
        """(pool slot, row inside the slot) where the token at ``position`` is written."""
        ref = self._requests[request].slots.get(position // self.block_size)
        if ref is None:
            raise KVarNPoolError(
                f"request {request!r}: position {position} has no pool slot (flushed or never planned)"
            )
        return ref.slot, position % self.block_size

    def finish(self, request: str) -> list[BlockRef]:
        """The request ended: free every slot it holds (its sink too) and return them."""
        req = self._requests.pop(request, None)
        if req is None:
            return []
        refs = sorted(req.slots.values(), key=lambda r: r.logical)
        self._free.extend(r.slot for r in refs)
        return refs
