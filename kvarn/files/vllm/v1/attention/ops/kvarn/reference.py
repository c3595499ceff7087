"""Reference decode attention over a paged two-tier KVarN cache (torch, fp32; the kernels' oracle).

Shapes (one layer):
    cache       uint8 [num_blocks, Hkv, record_size]   compressed records
    pool_k/v    fp16  [num_slots, G, Hkv, D]           rotated K/V of pool-resident blocks
    block_slot  int32 [num_blocks]                     pool slot of a block, −1 when compressed
    block_table int32 [B, max_blocks]                  physical block ids per request
    seq_lens    int32 [B]                              tokens to attend over (0 = padded row)
    q           [B, Hq, D]                             un-rotated queries; output likewise

Logical block 0 (the sink) and every block not yet flushed are read from the pool as fp16; the others
are dequantized from their records.
"""

from __future__ import annotations

import torch

from .layout import RecordLayout
from .quant import dequantize_blocks, quantize_blocks


def flush_reference(
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    slots: torch.Tensor,
    blocks: torch.Tensor,
    layout: RecordLayout,
    iters: int,
) -> None:
    """Compress pool slots ``slots`` into cache blocks ``blocks`` (all KV heads), in place.
    Entries with a negative slot or block are skipped, as the store kernel skips them."""
    keep = (slots >= 0) & (blocks >= 0)
    if not bool(keep.all()):
        slots, blocks = slots[keep], blocks[keep]
    if slots.numel() == 0:
        return
    n, hkv = slots.numel(), pool_k.shape[2]
    g, d = layout.group, layout.head_dim
    # [n, G, Hkv, D] -> [n·Hkv, G, D]: one tile per (block, head)
    k = pool_k[slots.long()].permute(0, 2, 1, 3).reshape(n * hkv, g, d)
    v = pool_v[slots.long()].permute(0, 2, 1, 3).reshape(n * hkv, g, d)
    rec = quantize_blocks(k, v, layout, iters)
    cache[blocks.long()] = rec.reshape(n, hkv, layout.size)


def gather_kv(
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    block_slot: torch.Tensor,
    blocks: torch.Tensor,
    layout: RecordLayout,
) -> tuple[torch.Tensor, torch.Tensor]:
    """K, V fp32 [n·G, Hkv, D] (rotated basis) of the physical blocks ``blocks``, in order."""
    g, d, hkv = layout.group, layout.head_dim, cache.shape[1]
    n = blocks.numel()
    k = torch.empty(n, g, hkv, d, dtype=torch.float32, device=cache.device)
    v = torch.empty_like(k)
    slot = block_slot[blocks.long()].long()
    in_pool = slot >= 0
    if in_pool.any():
        k[in_pool] = pool_k[slot[in_pool]].float()
        v[in_pool] = pool_v[slot[in_pool]].float()
    comp = ~in_pool
    if comp.any():
        rec = cache[blocks.long()[comp]].reshape(-1, layout.size)
        kd, vd = dequantize_blocks(rec, layout)  # [m·Hkv, G, D]
        m = int(comp.sum())
        k[comp] = kd.reshape(m, hkv, g, d).permute(0, 2, 1, 3)
        v[comp] = vd.reshape(m, hkv, g, d).permute(0, 2, 1, 3)
    return k.reshape(n * g, hkv, d), v.reshape(n * g, hkv, d)


def reference_decode(
    q: torch.Tensor,
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    block_slot: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    layout: RecordLayout,
    h16: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Decode attention, fp32 [B, Hq, D]; q is rotated with ``h16`` and the output un-rotated."""
    b, hq, d = q.shape
    hkv = cache.shape[1]
    qpk = hq // hkv
    g = layout.group
    h = h16.float()
    q_rot = q.float() @ h
    out = torch.zeros(b, hq, d, dtype=torch.float32, device=q.device)
    for i in range(b):
        n_tok = int(seq_lens[i])
        if n_tok == 0:
            continue  # a padded row: 0, never NaN
        nblk = -(-n_tok // g)
        k, v = gather_kv(cache, pool_k, pool_v, block_slot, block_table[i, :nblk], layout)
        k, v = k[:n_tok], v[:n_tok]  # [L, Hkv, D]
        qi = q_rot[i].reshape(hkv, qpk, d)
        s = torch.einsum("hqd,lhd->hql", qi, k) * scale
        p = torch.softmax(s, dim=-1)
        o = torch.einsum("hql,lhd->hqd", p, v).reshape(hq, d)
        out[i] = o @ h
    return out


def reference_prefix(
    q: torch.Tensor,
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    block_slot: torch.Tensor,
    block_table: torch.Tensor,
    query_start_loc: list[int],
    seq_lens: list[int],
    layout: RecordLayout,
    h16: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of multi-token queries over their requests' caches, fp32 [T, Hq, D]: the
    tokens of request i (q[qsl[i]:qsl[i+1]]) sit at positions seq_lens[i] - q_len .. seq_lens[i] - 1
    and every one of the seq_lens[i] tokens is in the cache. The oracle of ``triton_prefix``."""
    t, hq, d = q.shape
    hkv = cache.shape[1]
    qpk = hq // hkv
    g = layout.group
    h = h16.float()
    out = torch.zeros(t, hq, d, dtype=torch.float32, device=q.device)
    for i, n_tok in enumerate(seq_lens):
        lo, hi = query_start_loc[i], query_start_loc[i + 1]
        if hi <= lo or n_tok < hi - lo:
            continue  # no query, or padding (a graph batch's request of length 0): zeros
        k, v = gather_kv(
            cache, pool_k, pool_v, block_slot, block_table[i, : -(-n_tok // g)], layout
        )
        k, v = k[:n_tok], v[:n_tok]  # [L, Hkv, D]
        qi = (q[lo:hi].float() @ h).reshape(hi - lo, hkv, qpk, d)
        s = torch.einsum("thqd,lhd->hqtl", qi, k) * scale
        pos_q = torch.arange(n_tok - (hi - lo), n_tok, device=q.device)[:, None]
        allowed = torch.arange(n_tok, device=q.device)[None, :] <= pos_q
        p = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
        o = torch.einsum("hqtl,lhd->thqd", p, v).reshape(hi - lo, hq, d)
        out[lo:hi] = o @ h
    return out
