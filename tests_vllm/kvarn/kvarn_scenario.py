"""Build a paged two-tier KVarN cache the way the backend will: pool writes, the bookkeeping of
``tiers.TwoTierBook``, and flushes through the reference or the store kernel. Shared by the CPU
(interpreter) tests, the GPU tests and the benchmark."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from kvarn_ops import hadamard, reference, tiers
from kvarn_ops import layout as layout_mod


@dataclass
class Scenario:
    layout: layout_mod.RecordLayout
    cache: torch.Tensor
    pool_k: torch.Tensor
    pool_v: torch.Tensor
    block_slot: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    comp_end: torch.Tensor  # int32 [B], from TwoTierBook.compressed_end
    h16: torch.Tensor
    k_rot: list[torch.Tensor]  # per request [L, Hkv, D] fp16 as written to the pool
    v_rot: list[torch.Tensor]
    flushed_blocks: int


def build(
    preset: str,
    head_dim: int,
    num_kv_heads: int,
    seq_lens: list[int],
    *,
    device: str | torch.device = "cpu",
    iters: int = 8,
    store: str = "reference",  # or "triton"
    seed: int = 0,
    extra_slots: int = 2,
) -> Scenario:
    lay = layout_mod.record_layout(preset, head_dim)
    g, d, hkv = lay.group, head_dim, num_kv_heads
    gen = torch.Generator(device="cpu").manual_seed(seed)
    nblks = [-(-n // g) for n in seq_lens]
    total = sum(nblks)
    max_blocks = max([1, *nblks])
    num_blocks = total + 3  # a few never-used blocks, so ids are not simply 0..n-1
    num_slots = total + extra_slots
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    h16 = hadamard.hadamard(d, torch.float16, device)
    cache = torch.zeros(num_blocks, hkv, lay.size, dtype=torch.uint8, device=device)
    # NaN in every pool row nobody wrote: a kernel that reads past seq_len is caught.
    pool_k = torch.full((num_slots, g, hkv, d), float("nan"), dtype=torch.float16, device=device)
    pool_v = torch.full_like(pool_k, float("nan"))
    block_slot = torch.full((num_blocks,), -1, dtype=torch.int32, device=device)
    block_table = torch.zeros(len(seq_lens), max_blocks, dtype=torch.int32, device=device)
    book = tiers.TwoTierBook(num_slots, g)
    k_all, v_all = [], []
    flushed = 0
    nxt = 0
    comp_end: list[int] = []
    for i, n in enumerate(seq_lens):
        ids = perm[nxt : nxt + nblks[i]]
        nxt += nblks[i]
        block_table[i, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        # Channel scales spread over ~e^±1 plus one outlier channel, like real keys.
        chan = torch.exp(torch.randn(1, hkv, d, generator=gen))
        chan[..., 3] *= 8
        k = (torch.randn(n, hkv, d, generator=gen) * chan).to(device)
        v = torch.randn(n, hkv, d, generator=gen).to(device)
        k_rot, v_rot = hadamard.rotate(k, h16), hadamard.rotate(v, h16)
        k_all.append(k_rot)
        v_all.append(v_rot)
        if n == 0:
            comp_end.append(1)
            continue
        req = f"r{i}"
        # Prefill of n−1 tokens, then the decode step that adds token n−1: committed = n − 1.
        plans = [book.step(req, ids, n - 1, n - 1)] if n > 1 else []
        plans.append(book.step(req, ids, n, 1))
        for plan in plans:
            for ref in plan.allocate:
                block_slot[ref.physical] = ref.slot
        for pos in range(0, n, g):
            slot, _ = book.slot_of_position(req, pos)
            rows = min(g, n - pos)
            pool_k[slot, :rows] = k_rot[pos : pos + rows]
            pool_v[slot, :rows] = v_rot[pos : pos + rows]
        refs = [r for p in plans for r in p.flush]
        if refs:
            slots_t = torch.tensor([r.slot for r in refs], dtype=torch.int32, device=device)
            blocks_t = torch.tensor([r.physical for r in refs], dtype=torch.int32, device=device)
            if store == "triton":
                from kvarn_ops import triton_store

                triton_store.store_blocks(cache, pool_k, pool_v, slots_t, blocks_t, lay, iters)
            else:
                reference.flush_reference(cache, pool_k, pool_v, slots_t, blocks_t, lay, iters)
            book.flushed(req, refs)
            for r in refs:
                block_slot[r.physical] = -1
                pool_k[r.slot] = float("nan")  # a freed slot must never be read again
                pool_v[r.slot] = float("nan")
            flushed += len(refs)
        comp_end.append(book.compressed_end(req))
    seq = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    ce = torch.tensor(comp_end, dtype=torch.int32, device=device)
    return Scenario(
        lay, cache, pool_k, pool_v, block_slot, block_table, seq, ce, h16, k_all, v_all, flushed
    )


def queries(sc: Scenario, qpk: int, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    b, hkv, d = len(sc.seq_lens), sc.cache.shape[1], sc.layout.head_dim
    return torch.randn(b, hkv * qpk, d, generator=gen).to(sc.cache.device).half()


def attention_args(sc: Scenario, q: torch.Tensor) -> tuple:
    """The positional arguments the reference and the Triton decode share, up to the softmax scale."""
    return (
        q,
        sc.cache,
        sc.pool_k,
        sc.pool_v,
        sc.block_slot,
        sc.block_table,
        sc.seq_lens,
        sc.layout,
        sc.h16,
        sc.layout.head_dim**-0.5,
    )


def ref_decode(sc: Scenario, q: torch.Tensor) -> torch.Tensor:
    return reference.reference_decode(*attention_args(sc, q))


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row cosine over head_dim, [B, Hq]; rows where both are 0 count as 1."""
    a, b = a.float(), b.float()
    num = (a * b).sum(-1)
    den = a.norm(dim=-1) * b.norm(dim=-1)
    both_zero = (a.abs().sum(-1) == 0) & (b.abs().sum(-1) == 0)
    return torch.where(both_zero, torch.ones_like(num), num / den.clamp_min(1e-30))
