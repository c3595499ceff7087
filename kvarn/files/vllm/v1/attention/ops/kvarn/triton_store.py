"""The store (flush) kernel: normalize, quantize, pack and write records for a batch of pool tiles.

A program per (group of list entries, KV head) handles K then V of each tile its entries name (a
flush list is mostly empty: ``flush_groups``). A tile is held as a 3-D tensor [R, C/P, P] with
P = 8/bits codes per byte, so packing is a shifted sum over the last axis (lowest index in the lowest
bits) and needs no reshape. Rows are axis 0; columns are the flattened axes (1, 2): for K, R = D and
C = G; for V, R = G and C = D.

Only sizes that are fixed for a model are constexpr (G, D, bits, record offsets); the number of tiles
is the grid and the iteration count is a plain runtime argument, so a flush never recompiles.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .decode_plan import _num_sms
from .launch import binding, kwargs_key, launch
from .layout import RecordLayout

# (kernel, its constexpr key) -> (kwargs, their key): built once, not per step (host time)
_KWARGS: dict[tuple, tuple[dict, int]] = {}


def _kwargs(kernel: str, key: tuple, build) -> tuple[dict, int]:
    got = _KWARGS.get((kernel, *key))
    if got is None:
        kw = build()
        got = _KWARGS[(kernel, *key)] = (kw, kwargs_key(kw))
    return got


@triton.jit
def _load_tile(base, s_row, s_col, R: tl.constexpr, CP: tl.constexpr, P: tl.constexpr):
    """M3[r, j, i] = base[r·s_row + (P·j + i)·s_col] as fp32."""
    r = tl.arange(0, R)[:, None, None]
    j = tl.arange(0, CP)[None, :, None]
    i = tl.arange(0, P)[None, None, :]
    return tl.load(base + r * s_row + (j * P + i) * s_col).to(tl.float32)


@triton.jit
def _col_std(x, R: tl.constexpr):
    mean = tl.sum(x, axis=0) / R
    dev = x - mean[None, :, :]
    return tl.sqrt(tl.sum(dev * dev, axis=0) / (R - 1))


@triton.jit
def _row_std(x, C: tl.constexpr):
    mean = tl.sum(tl.sum(x, axis=2), axis=1) / C
    dev = x - mean[:, None, None]
    return tl.sqrt(tl.sum(tl.sum(dev * dev, axis=2), axis=1) / (C - 1))


@triton.jit
def _imbalance(s_col, s_row):
    c_max = tl.max(tl.max(s_col, axis=1), axis=0)
    c_min = tl.min(tl.min(s_col, axis=1), axis=0)
    r_max = tl.max(s_row, axis=0)
    r_min = tl.min(s_row, axis=0)
    return c_max / tl.maximum(c_min, 1e-8) + r_max / tl.maximum(r_min, 1e-8)


@triton.jit
def _scaled(m, lc, lr):
    return m / tl.exp(lc)[None, :, :] / tl.exp(lr)[:, None, None]


@triton.jit
def _round_half_even(x):
    # x >= 0 here. x − floor(x) is exact in fp32, so ties are detected exactly (floor(x + 0.5)
    # would round x + 0.5 for some x just below a half and pick the wrong integer).
    f = tl.floor(x)
    frac = x - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) == 1.0
    up = (frac > 0.5) | ((frac == 0.5) & odd)
    return f + up.to(tl.float32)


@triton.jit
def _norm_quant_pack(
    src,
    s_row,
    s_col,
    n_iters,
    rec_u8,
    rec_f16,  # this record's base, as bytes and as fp16
    CODES_OFF: tl.constexpr,
    ROWVEC_OFF: tl.constexpr,  # fp16 index: δ·e^ℓr per row (K: s_col[d]; V: s_row[g])
    ZP_OFF: tl.constexpr,  # fp16 index: lo·e^ℓr per row
    COLVEC_OFF: tl.constexpr,  # fp16 index: e^ℓc per column (K: s_row[g]; V: s_col[d])
    R: tl.constexpr,
    C: tl.constexpr,
    BITS: tl.constexpr,
):
    P: tl.constexpr = 8 // BITS
    CP: tl.constexpr = C // P
    QMAX: tl.constexpr = (1 << BITS) - 1
    # The tile is reloaded (L1/L2 hits) instead of kept beside `cur`: a [256, 128] fp32 tile twice
    # would not fit in registers.
    m = _load_tile(src, s_row, s_col, R, CP, P)
    lc = tl.zeros([CP, P], dtype=tl.float32)
    lr = tl.zeros([R], dtype=tl.float32)
    sc = _col_std(m, R)
    best = _imbalance(sc, _row_std(m, C))
    best_lc = lc
    best_lr = lr
    for _ in range(n_iters):
        lc = tl.minimum(tl.maximum(lc + tl.log(tl.minimum(tl.maximum(sc, 1e-3), 1e3)), -0.3), 10.0)
        cur = _scaled(_load_tile(src, s_row, s_col, R, CP, P), lc, lr)
        sr = _row_std(cur, C)
        lr = tl.minimum(tl.maximum(lr + tl.log(tl.minimum(tl.maximum(sr, 1e-3), 1e3)), -0.3), 10.0)
        cur = _scaled(_load_tile(src, s_row, s_col, R, CP, P), lc, lr)
        sc = _col_std(cur, R)
        imb = _imbalance(sc, _row_std(cur, C))
        take = imb <= best  # ties take the later iterate
        best = tl.where(take, imb, best)
        best_lc = tl.where(take, lc, best_lc)
        best_lr = tl.where(take, lr, best_lr)
    b = _scaled(_load_tile(src, s_row, s_col, R, CP, P), best_lc, best_lr)
    lo = tl.min(tl.min(b, axis=2), axis=1)
    hi = tl.max(tl.max(b, axis=2), axis=1)
    delta = tl.maximum((hi - lo) / QMAX, 1e-10)
    q = _round_half_even((b - lo[:, None, None]) / delta[:, None, None])
    q = tl.minimum(tl.maximum(q, 0.0), QMAX).to(tl.int32)
    shifts = tl.arange(0, P) * BITS
    packed = tl.sum(q << shifts[None, None, :], axis=2)  # [R, CP]
    r = tl.arange(0, R)
    jj = tl.arange(0, CP)
    tl.store(rec_u8 + CODES_OFF + r[:, None] * CP + jj[None, :], packed.to(tl.uint8))
    row_scale = tl.exp(best_lr)
    tl.store(rec_f16 + ROWVEC_OFF + r, (delta * row_scale).to(tl.float16))
    tl.store(rec_f16 + ZP_OFF + r, (lo * row_scale).to(tl.float16))
    cidx = jj[:, None] * P + tl.arange(0, P)[None, :]
    tl.store(rec_f16 + COLVEC_OFF + cidx, tl.exp(best_lc).to(tl.float16))


def flush_groups(n: int, hkv: int, sms: int, busy: int = 0) -> tuple[int, int]:
    """(programs per KV head that flush a list of ``n`` entries, entries each reads: a power of
    two): entry e goes to program e mod groups. A step's list has an entry per pool slot (an
    engine of 256 sequences: ~830) and is nearly always empty; each of its programs runs at the
    flush's 8-16 warps and registers (one program an SM: 255 registers at 8 warps, 128 at 16), so
    programs past one wave of the SMs wait for a wave of their own even when they return at once
    (run 62: a program per entry, 835 entries, 15-23 µs a step). So one wave: as many programs
    per head as the SMs left beside ``busy`` other programs of the launch (at least one), no more
    than n, each reading its entries in one load and flushing only the set ones (H200, run 75: the
    store kernel over an empty list of 88 entries at batch 8, 2.1 -> 1.7 µs). Neighbouring slots go
    to different programs, so the flushes after a long prefill (consecutive slots) still spread."""
    if n <= 0:
        return 0, 1
    groups = min(n, max(1, (sms - busy) // hkv))
    return groups, triton.next_power_of_2(-(-n // groups))


@triton.jit
def _entries(blocks, g, n_groups, n, EPP: tl.constexpr):
    """Entries g, g + n_groups, ... (EPP of them, below n) of a flush list: their indices, which
    are set (>= 0) and how many."""
    e = g + n_groups * tl.arange(0, EPP)
    is_set = tl.load(blocks + e, mask=e < n, other=-1) >= 0
    return e, is_set, tl.sum(is_set.to(tl.int32), axis=0)


@triton.jit
def _kth(e, is_set, k):
    """The k-th (from 0) of ``e`` where ``is_set``: a program walks its set entries only, however
    many it reads."""
    rank = tl.cumsum(is_set.to(tl.int32), axis=0) - 1
    return tl.max(tl.where(is_set & (rank == k), e, -1), axis=0).to(tl.int64)


@triton.jit(do_not_specialize=["n_iters", "n_entries"])
def _kvarn_store_kernel(
    pool_k,
    pool_v,
    slots,
    blocks,
    cache_u8,
    cache_f16,
    s_ps,
    s_pg,
    s_ph,  # pool strides (elements): slot, token, head; head_dim is contiguous
    s_cb,
    s_ch,  # cache strides (bytes): block, head
    n_iters,
    n_entries,
    D: tl.constexpr,
    G: tl.constexpr,
    KB: tl.constexpr,
    VB: tl.constexpr,
    K_CODES: tl.constexpr,
    K_SCOL: tl.constexpr,
    K_ZP: tl.constexpr,
    K_SROW: tl.constexpr,
    V_CODES: tl.constexpr,
    V_SCOL: tl.constexpr,
    V_SROW: tl.constexpr,
    V_ZP: tl.constexpr,
    EPP: tl.constexpr,
):
    """Program (g, h) flushes entries g, g + groups, ... of the list; an entry with a negative
    slot or block is empty (a step's fixed-size list, by slot)."""
    g = tl.program_id(0)
    h = tl.program_id(1)
    e, is_set, n_set = _entries(blocks, g, tl.num_programs(0), n_entries, EPP)
    for k in range(0, n_set):
        ent = _kth(e, is_set, k)
        slot = tl.load(slots + ent).to(tl.int64)
        blk = tl.load(blocks + ent).to(tl.int64)
        if slot >= 0:
            _flush_tile(pool_k, pool_v, slot, blk, h, cache_u8, cache_f16, s_ps, s_pg, s_ph,
                        s_cb, s_ch, n_iters, D, G, KB, VB, K_CODES, K_SCOL, K_ZP, K_SROW, V_CODES,
                        V_SCOL, V_SROW, V_ZP)  # fmt: skip


@triton.jit
def _flush_tile(pool_k, pool_v, slot, blk, h, cache_u8, cache_f16, s_ps, s_pg, s_ph, s_cb, s_ch,
                n_iters, D: tl.constexpr, G: tl.constexpr, KB: tl.constexpr, VB: tl.constexpr,
                K_CODES: tl.constexpr, K_SCOL: tl.constexpr, K_ZP: tl.constexpr,
                K_SROW: tl.constexpr, V_CODES: tl.constexpr, V_SCOL: tl.constexpr,
                V_SROW: tl.constexpr, V_ZP: tl.constexpr):  # fmt: skip
    """Pool slot ``slot``, KV head ``h``, compressed into block ``blk``'s record: K, then V."""
    rec = blk * s_cb + h * s_ch  # byte offset of the record
    src = slot * s_ps + h * s_ph
    # K tile [D, G]: row d, column g -> pool[slot, g, h, d]
    _norm_quant_pack(pool_k + src, 1, s_pg, n_iters, cache_u8 + rec, cache_f16 + rec // 2,
                     K_CODES, K_SCOL // 2, K_ZP // 2, K_SROW // 2, D, G, KB)  # fmt: skip
    # V tile [G, D]: row g, column d -> pool[slot, g, h, d]
    _norm_quant_pack(pool_v + src, s_pg, 1, n_iters, cache_u8 + rec, cache_f16 + rec // 2,
                     V_CODES, V_SROW // 2, V_ZP // 2, V_SCOL // 2, G, D, VB)  # fmt: skip


def store_blocks(
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    slots: torch.Tensor,
    blocks: torch.Tensor,
    layout: RecordLayout,
    iters: int,
    num_warps: int | None = None,
) -> None:
    """Compress pool slots ``slots`` into cache blocks ``blocks`` (int32 [N] each), all KV heads.
    An entry with a negative slot or block is skipped on the device, so a caller can pass a
    fixed-size list (``SlotPlan.flush_by_slot``) without reading it back: no host sync, and the
    launch replays in a CUDA graph.

    cache uint8 [num_blocks, Hkv, size]; pool_k/v fp16 [num_slots, G, Hkv, D] with D contiguous.
    A layer that stores every step binds once instead (``LayerStore``)."""
    if slots.numel():
        LayerStore(cache, pool_k, pool_v, layout, bind=False).store(slots, blocks, iters, num_warps)


class LayerStore:
    """One layer's flush (``store``: ``store_blocks``) and a step's flush with its pool write
    (``flush_write``: one launch) with what stays fixed across its steps checked and built once:
    the shapes, the cache's fp16 view, the strides, the kernels' constants, and (``bind``) a
    ``launch.binding`` so that only the step's own tensors are specialized per flush-write.
    Through the compiled launcher directly once compiled (``launch.py``): Triton's own binding of
    the flush and write launches was over a third of an eager step's host time (run 45).
    ``DecodeWorkspace.store`` keeps one per layer."""

    def __init__(
        self,
        cache: torch.Tensor,
        pool_k: torch.Tensor,
        pool_v: torch.Tensor,
        layout: RecordLayout,
        *,
        bind: bool = True,
    ) -> None:
        hkv = cache.shape[1]
        g, d = layout.group, layout.head_dim
        if cache.dtype != torch.uint8 or cache.shape[2] != layout.size or not cache.is_contiguous():
            raise ValueError(f"cache must be contiguous uint8 [blocks, Hkv, {layout.size}]")
        if (
            pool_k.shape[1:] != (g, hkv, d)
            or pool_k.stride(-1) != 1
            or pool_v.stride() != pool_k.stride()
        ):
            raise ValueError(
                f"pools must be fp16 [slots, {g}, {hkv}, {d}] with head_dim contiguous"
            )
        self.layout, self.hkv, self.d = layout, hkv, d
        self.binding = binding() if bind else None
        pool_strides = (pool_k.stride(0), pool_k.stride(1), pool_k.stride(2))
        # the store kernel's arguments 4-10, the flush-write kernel's 3-9
        self.store_fixed = (cache, cache.view(torch.float16), *pool_strides, cache.stride(0),
                            cache.stride(1))  # fmt: skip
        self.pools = (pool_k, pool_v)
        self.trash = pool_k.shape[0] - 1
        # a bound flush-write passes the tensors it holds as pointers (launch's restore; not
        # position 0, the pool of K, which the fast path checks is on the GPU)
        c16 = self.store_fixed[1]
        if self.binding is None:
            self.fw_head, self.fw_restore = (pool_v, cache, c16), ()
        else:
            self.fw_head = (pool_v.data_ptr(), cache.data_ptr(), c16.data_ptr())
            self.fw_restore = ((1, pool_v), (3, cache), (4, c16))
        self.warps = 8 if d * g <= 128 * 128 else 16
        self.sms = _num_sms(cache.device)
        self.consts: dict[tuple, tuple[dict, int]] = {}  # (kernel, warps) -> kwargs, their key

    def store(
        self, slots: torch.Tensor, blocks: torch.Tensor, iters: int, num_warps: int | None = None
    ) -> None:
        """``store_blocks`` of this layer."""
        n = slots.shape[0]
        if n == 0:
            return
        warps = num_warps or self.warps
        layout = self.layout
        groups, epp = flush_groups(n, self.hkv, self.sms)
        kw, kwkey = _kwargs(
            "store",
            (layout, warps, epp),
            lambda: dict(num_warps=warps, EPP=epp, **layout.constexprs()),
        )
        args = (*self.pools, slots, blocks, *self.store_fixed, iters, n)
        grid = (groups, self.hkv)
        # not bound: a step flushes through flush_write; this serves store_blocks' other callers
        launch(_kvarn_store_kernel, grid, args, kw, kwkey=kwkey)

    def flush_write(
        self,
        by_slot: torch.Tensor,
        iters: int,
        h16: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        write_slots: torch.Tensor,
        write_rows: torch.Tensor,
        num_warps: int | None = None,
    ) -> None:
        """A step's flush (slot s into block ``by_slot[s]``, -1: none; int32 [slots]) then its
        pool write (``rotate_write``'s), in one launch (``_flush_write_kernel``)."""
        t, hkv, d = key.shape
        n = by_slot.shape[0]
        if n == 0 and t == 0:
            return
        if key.shape != value.shape or hkv != self.hkv or d != self.d:
            raise ValueError(f"flush_write: key and value must be [T, {self.hkv}, {self.d}]")
        ks, vs = key.stride(), value.stride()
        if ks[2] != 1 or vs[2] != 1:
            raise ValueError("flush_write: head_dim must be contiguous")
        n_write = t * (d // ROTATE_COLUMNS)
        groups, epp = flush_groups(n, hkv, self.sms, n_write)
        got = self.consts.get(("flush_write", num_warps, epp))
        if got is None:
            warps = num_warps or self.warps
            got = self.consts["flush_write", num_warps, epp] = _kwargs(
                "flush_write",
                (self.layout, warps, epp),
                lambda: dict(
                    num_warps=warps,
                    CH=d,  # all of H's slice at once: see rotate_write
                    CB=ROTATE_COLUMNS,
                    EPP=epp,
                    **self.layout.constexprs(),
                ),
            )
        kw, kwkey = got
        pv, c8, c16 = self.fw_head
        args = (self.pools[0], pv, by_slot, c8, c16, *self.store_fixed[2:], iters, key, value,
                ks[0], ks[1], vs[0], vs[1], h16.contiguous(), write_slots, write_rows, self.trash,
                t, n)  # fmt: skip
        vary = None if self.binding is None else _FLUSH_WRITE_VARY
        launch(_flush_write_kernel, (n_write + groups, hkv), args, kw, kwkey=kwkey,
               bound=self.binding, vary=vary, restore=self.fw_restore)  # fmt: skip


# What a bound flush-write specializes per call: the step's own tensors and strides (the flush
# list; the K/V, their strides, H, the slots and rows), not the layer's, nor the counts the kernel
# does not specialize (iterations, tokens, slots).
_FLUSH_WRITE_VARY = (2, 11, 12, 13, 14, 15, 16, 17, 18, 19)


@triton.jit
def _write_columns(k_ptr, v_ptr, s_kt, s_kh, s_vt, s_vh, h_ptr, t, h, cols, slot, row, pool_k,
                   pool_v, s_ps, s_pg, s_ph, D: tl.constexpr, CH: tl.constexpr, CB: tl.constexpr):  # fmt: skip
    """pool[slot, row, h, cols] = (x[t, h, :]·H)[cols] for K and V (fp32 sums, stored fp16)."""
    acc_k = tl.zeros([CB], tl.float32)
    acc_v = tl.zeros([CB], tl.float32)
    for c in tl.static_range(0, D, CH):
        j = c + tl.arange(0, CH)
        hm = tl.load(h_ptr + j[:, None] * D + cols[None, :]).to(tl.float32)  # H[c..c+CH, cols]
        xk = tl.load(k_ptr + t * s_kt + h * s_kh + j).to(tl.float32)
        xv = tl.load(v_ptr + t * s_vt + h * s_vh + j).to(tl.float32)
        acc_k += tl.sum(xk[:, None] * hm, axis=0)
        acc_v += tl.sum(xv[:, None] * hm, axis=0)
    dst = slot * s_ps + row * s_pg + h * s_ph + cols
    tl.store(pool_k + dst, acc_k.to(tl.float16))
    tl.store(pool_v + dst, acc_v.to(tl.float16))


@triton.jit
def _rotate_write_kernel(
    k_ptr,
    v_ptr,
    s_kt,
    s_kh,
    s_vt,
    s_vh,
    h_ptr,
    slots,
    rows,
    pool_k,
    pool_v,
    s_ps,
    s_pg,
    s_ph,
    trash,
    D: tl.constexpr,
    CH: tl.constexpr,
    CB: tl.constexpr,
):
    """pool[slot, row, h, cols] = (x[t, h, :]·H)[cols] (fp32 sums, stored fp16) for K and V; one
    program per (token, KV head, CB output columns); a token with slot -1 (padding) goes to the
    ``trash`` slot. Columns are split over programs because a decode step has few tokens: one
    program per (token, head) walked all of H alone (D = 256, batch 1: 28 µs of a 77 µs step)."""
    t = tl.program_id(0)
    h = tl.program_id(1)
    cols = tl.program_id(2) * CB + tl.arange(0, CB)
    slot = tl.load(slots + t).to(tl.int64)
    slot = tl.where(slot >= 0, slot, trash)
    row = tl.load(rows + t).to(tl.int64)
    _write_columns(k_ptr, v_ptr, s_kt, s_kh, s_vt, s_vh, h_ptr, t, h, cols, slot, row, pool_k,
                   pool_v, s_ps, s_pg, s_ph, D, CH, CB)  # fmt: skip


@triton.jit(do_not_specialize=["n_iters", "n_tokens", "n_slots"])
def _flush_write_kernel(
    pool_k,
    pool_v,
    by_slot,
    cache_u8,
    cache_f16,
    s_ps,
    s_pg,
    s_ph,
    s_cb,
    s_ch,
    n_iters,
    k_ptr,
    v_ptr,
    s_kt,
    s_kh,
    s_vt,
    s_vh,
    h_ptr,
    slots,
    rows,
    trash,
    n_tokens,
    n_slots,  # entries of by_slot (the pool's slots)
    D: tl.constexpr,
    G: tl.constexpr,
    KB: tl.constexpr,
    VB: tl.constexpr,
    K_CODES: tl.constexpr,
    K_SCOL: tl.constexpr,
    K_ZP: tl.constexpr,
    K_SROW: tl.constexpr,
    V_CODES: tl.constexpr,
    V_SCOL: tl.constexpr,
    V_SROW: tl.constexpr,
    V_ZP: tl.constexpr,
    CH: tl.constexpr,
    CB: tl.constexpr,
    EPP: tl.constexpr,
):
    """A step's flush and pool write in one launch (a launch fewer a step than the store kernel
    then the write kernel). Program (p, h) with p < n_tokens x D / CB writes token p // (D / CB),
    CB columns, as the write kernel does (first: they never wait behind the flush's programs); the
    others flush slots g, g + groups, ... (g = p - those), each into block by_slot[slot] (nothing
    where that is -1). A slot a flush frees may take a token this very step: that token must not
    land before the flush has read the slot, so its write is left to the flush program of its
    slot, which makes it after a barrier (program order within one program, and every thread's
    loads of the tile done)."""
    p = tl.program_id(0)
    h = tl.program_id(1)
    n_write = n_tokens * (D // CB)
    if p >= n_write:
        g = p - n_write
        e, is_set, n_set = _entries(by_slot, g, tl.num_programs(0) - n_write, n_slots, EPP)
        for k in range(0, n_set):
            slot = _kth(e, is_set, k)  # int64: x its stride passes 2^31 elements
            blk = tl.load(by_slot + slot).to(tl.int64)
            _flush_tile(pool_k, pool_v, slot, blk, h, cache_u8, cache_f16, s_ps, s_pg, s_ph, s_cb,
                        s_ch, n_iters, D, G, KB, VB, K_CODES, K_SCOL, K_ZP, K_SROW, V_CODES,
                        V_SCOL, V_SROW, V_ZP)  # fmt: skip
            tl.debug_barrier()
            for t in range(n_tokens):
                dest = tl.load(slots + t).to(tl.int64)
                if tl.where(dest >= 0, dest, trash) == slot:
                    row = tl.load(rows + t).to(tl.int64)
                    for c in tl.static_range(0, D, CB):
                        cols = c + tl.arange(0, CB)
                        _write_columns(k_ptr, v_ptr, s_kt, s_kh, s_vt, s_vh, h_ptr, t, h, cols,
                                       slot, row, pool_k, pool_v, s_ps, s_pg, s_ph, D, CH,
                                       CB)  # fmt: skip
    else:
        w = p
        t = w // (D // CB)
        cols = (w % (D // CB)) * CB + tl.arange(0, CB)
        slot = tl.load(slots + t).to(tl.int64)
        slot = tl.where(slot >= 0, slot, trash)
        listed = slot < n_slots
        flushed = tl.load(by_slot + tl.where(listed, slot, 0), mask=listed, other=-1) >= 0
        if (listed & flushed) == 0:  # else the flush program of its slot writes it
            row = tl.load(rows + t).to(tl.int64)
            _write_columns(k_ptr, v_ptr, s_kt, s_kh, s_vt, s_vh, h_ptr, t, h, cols, slot, row,
                           pool_k, pool_v, s_ps, s_pg, s_ph, D, CH, CB)  # fmt: skip


# Output columns a rotate_write program computes.
ROTATE_COLUMNS = 32


def rotate_write(
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    h16: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    write_slots: torch.Tensor,
    write_rows: torch.Tensor,
) -> None:
    """``hadamard.rotate`` of each token's K and V written into its pool slot and row, in one launch
    (the torch form is two GEMMs and several small kernels; cuBLAS's fp32 GEMM for a batch of one
    took 51 µs a call on the H200: gpu/kvarn/probe_step.py). Slot -1 goes to the pools' last slot.
    A layer's step writes with its flush in one launch instead (``LayerStore.flush_write``).
    A program loads its whole slice of H (D x 32) and the token's K and V at once and reduces
    once (CH = D): in 64-row chunks each chunk's loads waited on the last one's reduction (H200,
    run 75: D 256, batch 1, the flush-write 8.7 -> 4.0 µs; batch 8, this kernel 6.2 -> 3.1;
    batch 32, 16.3 -> 7.3)."""
    ps = pool_k.stride()
    if ps != pool_v.stride():
        raise ValueError("rotate_write: the pools must be alike")
    t, hkv, d = key.shape
    if t == 0:
        return
    ks, vs = key.stride(), value.stride()
    if ks[2] != 1 or vs[2] != 1:
        raise ValueError("rotate_write: head_dim must be contiguous")
    kw, kwkey = _kwargs(
        "rotate_write", (d,), lambda: dict(D=d, CH=d, CB=ROTATE_COLUMNS, num_warps=4)
    )
    args = (key, value, ks[0], ks[1], vs[0], vs[1], h16.contiguous(), write_slots, write_rows,
            pool_k, pool_v, ps[0], ps[1], ps[2], pool_k.shape[0] - 1)  # fmt: skip
    launch(_rotate_write_kernel, (t, hkv, d // ROTATE_COLUMNS), args, kw, kwkey=kwkey)
