"""The fused KVarN decode: one program per (request, KV head[, split]) serves all its query heads.

Per block the program reads either the fp16 pool slot (sink, unflushed tail) or the record, and
never materializes K̂ or V̂: the scales fold into the small operands instead,

    S[h,g] = s_rowK[g]·(Σ_d (q[h,d]·s_colK[d])·code[d,g] + Σ_d q[h,d]·zpK[d])
    O[h,d] = s_colV[d]·(Σ_g (p[h,g]·s_rowV[g])·code[g,d] + Σ_g p[h,g]·zpV[g])

so the only per-element work on the codes is unpack + convert, and both products are tensor-core
dots on fp16 codes. The convert is integer-only by default (DEQ=1): a code's bits reinterpreted as an
fp16 subnormal are exactly c·2^-24, and the dot is scaled back by 2^24 (measured on the H200: ~1.4×
faster than int->fp16 conversion, which runs on the slow conversion unit). Packed bytes are never
interleaved back: K nibbles split the tile into even and odd tokens (two score halves), V codes split
channels into four residue classes d = 4j + i (four accumulators), and the output is written back
through the same permutation. On CUDA, DEQ=1 runs as DEQ=2: the same subnormal codes, unpacked four
bytes at a time by a few 32-bit PTX instructions instead of per-byte extract/shift/mask. The query
heads of a KV head are the MMA's M side, padded to 8 rows (not 16: half the score and softmax work);
per block there is one cross-warp max and one cross-warp sum (the zero-point term); the softmax
denominator is kept per token and reduced once after the loop.

Blocks [1, comp_end) (compressed) go through a branch-free hot loop; the sink and the tail go through
a short loop that follows the slot map. Split-K: stage 1 writes each split's normalized O and
log2-sum-exp, stage 2 combines. Only sizes fixed for a model and the kernel variant are constexpr, plus
IS_SPLIT (two variants in all); batch, lengths, block table and the split count are runtime values,
so decode steps never recompile.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .config import KVarNConfig
from .layout import RecordLayout

LOG2E = 1.4426950408889634
# Register cap (ptxas maxnreg) of the decode kernel per head size on CUDA; None: the compiler's
# choice (it takes all 255 and fits two 4-warp programs per SM). A cap trades spills for resident
# programs, which hide the latency of each program's serial block loop. Fixed per deployment (it is a
# compile option, so it never changes between steps); gpu/kvarn/bench_speedpath.py times the options.
# D=128 at 168 (three programs per SM): 1.1-1.4x faster than uncapped from batch 8 on, H200, run 6;
# 128 spills too much. D=256 stays uncapped: its 76 KiB of shared memory allows two programs anyway.
MAXNREG: dict[int, int | None] = {128: 168, 256: None}


@triton.jit
def _as_f16(c, DEQ: tl.constexpr):
    """uint8 codes -> fp16 operand. DEQ=1: the code's bits as an fp16 subnormal (c·2^-24, exact;
    integer ops only, no int->float conversion unit); the caller multiplies the dot by 2^24.
    DEQ=0: a plain conversion."""
    if DEQ == 1:
        return c.to(tl.int16).to(tl.float16, bitcast=True)
    else:
        return c.to(tl.float16)


# DEQ=2 (CUDA only; the interpreter cannot run PTX): the same subnormal codes, unpacked four bytes
# at a time in 32-bit registers. One AND/SHR masks a nibble (or crumb) of every byte at once and one
# PRMT spreads two of those bytes into the two halves of an fp16x2, so a code costs < 1 instruction
# instead of a byte extract, shift, mask and convert each.
_NIB_ASM = tl.constexpr(
    "{.reg .b32 t, u;\n"
    "and.b32 t, $4, 0x0F0F0F0F;\n"
    "shr.u32 u, $4, 4;\n"
    "and.b32 u, u, 0x0F0F0F0F;\n"
    "prmt.b32 $0, t, 0, 0x4140;\n"
    "prmt.b32 $1, t, 0, 0x4342;\n"
    "prmt.b32 $2, u, 0, 0x4140;\n"
    "prmt.b32 $3, u, 0, 0x4342;}"
)
_CRUMB_ASM = tl.constexpr(
    "{.reg .b32 t0, t1, t2, t3;\n"
    "and.b32 t0, $8, 0x03030303;\n"
    "shr.u32 t1, $8, 2;\n"
    "and.b32 t1, t1, 0x03030303;\n"
    "shr.u32 t2, $8, 4;\n"
    "and.b32 t2, t2, 0x03030303;\n"
    "shr.u32 t3, $8, 6;\n"
    "and.b32 t3, t3, 0x03030303;\n"
    "prmt.b32 $0, t0, 0, 0x4140;\n"
    "prmt.b32 $1, t0, 0, 0x4342;\n"
    "prmt.b32 $2, t1, 0, 0x4140;\n"
    "prmt.b32 $3, t1, 0, 0x4342;\n"
    "prmt.b32 $4, t2, 0, 0x4140;\n"
    "prmt.b32 $5, t2, 0, 0x4342;\n"
    "prmt.b32 $6, t3, 0, 0x4140;\n"
    "prmt.b32 $7, t3, 0, 0x4342;}"
)


@triton.jit
def _nibbles(x, DEQ: tl.constexpr):
    """uint8 -> (low nibble, high nibble) as fp16 operands (subnormal bits for DEQ 1 and 2)."""
    if DEQ == 2:
        lo, hi = tl.inline_asm_elementwise(
            _NIB_ASM, "=r,=r,=r,=r,r", [x], dtype=(tl.float16, tl.float16), is_pure=True, pack=4
        )
        return lo, hi
    else:
        return _as_f16(x & 15, DEQ), _as_f16(x >> 4, DEQ)


@triton.jit
def _crumbs(x, DEQ: tl.constexpr):
    """uint8 -> its four 2-bit codes (bits 0-1 first) as fp16 operands."""
    if DEQ == 2:
        c0, c1, c2, c3 = tl.inline_asm_elementwise(
            _CRUMB_ASM,
            "=r,=r,=r,=r,=r,=r,=r,=r,r",
            [x],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16),
            is_pure=True,
            pack=4,
        )
        return c0, c1, c2, c3
    else:
        return (
            _as_f16(x & 3, DEQ),
            _as_f16((x >> 2) & 3, DEQ),
            _as_f16((x >> 4) & 3, DEQ),
            _as_f16(x >> 6, DEQ),
        )


@triton.jit
def _load_record(
    cache_u8,
    cache_f16,
    rec,
    has,
    dd,
    tok,
    jq,
    D: tl.constexpr,
    G: tl.constexpr,
    VB: tl.constexpr,
    K_CODES: tl.constexpr,
    K_SCOL: tl.constexpr,
    K_ZP: tl.constexpr,
    K_SROW: tl.constexpr,
    V_CODES: tl.constexpr,
    V_SCOL: tl.constexpr,
    V_SROW: tl.constexpr,
    V_ZP: tl.constexpr,
):
    """Raw fields of one record (byte offset ``rec``); all-zero when ``has`` is false."""
    G2: tl.constexpr = G // 2
    VROW: tl.constexpr = D * VB // 8
    u8 = cache_u8 + rec
    f16 = cache_f16 + rec // 2
    kb = tl.load(u8 + K_CODES + dd[:, None] * G2 + tok[None, :], mask=has, other=0)
    kscol = tl.load(f16 + K_SCOL // 2 + dd, mask=has, other=0.0)
    kzp = tl.load(f16 + K_ZP // 2 + dd, mask=has, other=0.0)
    ksr0 = tl.load(f16 + K_SROW // 2 + 2 * tok, mask=has, other=0.0)
    ksr1 = tl.load(f16 + K_SROW // 2 + 2 * tok + 1, mask=has, other=0.0)
    if VB == 2:  # noqa: SIM108  (byte j of a row holds channels 4j..4j+3)
        vcol = jq
    else:  # VB == 4: bytes 2j, 2j+1 hold channels 4j..4j+3; the second half is loaded below
        vcol = 2 * jq
    ve = tl.load(u8 + V_CODES + (2 * tok)[:, None] * VROW + vcol[None, :], mask=has, other=0)
    vo = tl.load(u8 + V_CODES + (2 * tok + 1)[:, None] * VROW + vcol[None, :], mask=has, other=0)
    if VB == 2:
        ve2 = ve
        vo2 = vo
    else:
        ve2 = tl.load(
            u8 + V_CODES + (2 * tok)[:, None] * VROW + vcol[None, :] + 1, mask=has, other=0
        )
        vo2 = tl.load(
            u8 + V_CODES + (2 * tok + 1)[:, None] * VROW + vcol[None, :] + 1, mask=has, other=0
        )
    vsr0 = tl.load(f16 + V_SROW // 2 + 2 * tok, mask=has, other=0.0)
    vsr1 = tl.load(f16 + V_SROW // 2 + 2 * tok + 1, mask=has, other=0.0)
    vzp0 = tl.load(f16 + V_ZP // 2 + 2 * tok, mask=has, other=0.0)
    vzp1 = tl.load(f16 + V_ZP // 2 + 2 * tok + 1, mask=has, other=0.0)
    vsc0 = tl.load(f16 + V_SCOL // 2 + 4 * jq, mask=has, other=0.0)
    vsc1 = tl.load(f16 + V_SCOL // 2 + 4 * jq + 1, mask=has, other=0.0)
    vsc2 = tl.load(f16 + V_SCOL // 2 + 4 * jq + 2, mask=has, other=0.0)
    vsc3 = tl.load(f16 + V_SCOL // 2 + 4 * jq + 3, mask=has, other=0.0)
    return (
        kb,
        kscol,
        kzp,
        ksr0,
        ksr1,
        ve,
        vo,
        ve2,
        vo2,
        vsr0,
        vsr1,
        vzp0,
        vzp1,
        vsc0,
        vsc1,
        vsc2,
        vsc3,
    )


@triton.jit
def _attend_record(
    q,
    m_i,
    l_i,
    acc0,
    acc1,
    acc2,
    acc3,
    kb,
    kscol,
    kzp,
    ksr0,
    ksr1,
    ve,
    vo,
    ve2,
    vo2,
    vsr0,
    vsr1,
    vzp0,
    vzp1,
    vsc0,
    vsc1,
    vsc2,
    vsc3,
    VB: tl.constexpr,
    DEQ: tl.constexpr,
):
    """Online-softmax update with one compressed block (every token of it is committed)."""
    SC: tl.constexpr = 1.0 if DEQ == 0 else 16777216.0
    qs = (q * kscol.to(tl.float32)[None, :]).to(tl.float16)
    qz = tl.sum(q * kzp.to(tl.float32)[None, :], axis=1)
    klo, khi = _nibbles(kb, DEQ)
    s0 = (tl.dot(qs, klo) * SC + qz[:, None]) * ksr0.to(tl.float32)[None, :]
    s1 = (tl.dot(qs, khi) * SC + qz[:, None]) * ksr1.to(tl.float32)[None, :]
    m_new = tl.maximum(m_i, tl.max(tl.maximum(s0, s1), axis=1))
    alpha = tl.exp2(m_i - m_new)  # m_new is finite: a compressed block has G real tokens
    p0 = tl.exp2(s0 - m_new[:, None])
    p1 = tl.exp2(s1 - m_new[:, None])
    l_i = l_i * alpha[:, None] + (p0 + p1)  # [QH, G/2]: reduced once, after the loop
    pz = tl.sum(p0 * vzp0.to(tl.float32)[None, :] + p1 * vzp1.to(tl.float32)[None, :], axis=1)
    p0s = (p0 * vsr0.to(tl.float32)[None, :]).to(tl.float16)
    p1s = (p1 * vsr1.to(tl.float32)[None, :]).to(tl.float16)
    if VB == 2:
        e0, e1, e2, e3 = _crumbs(ve, DEQ)
        o0, o1, o2, o3 = _crumbs(vo, DEQ)
    else:
        e0, e1 = _nibbles(ve, DEQ)
        e2, e3 = _nibbles(ve2, DEQ)
        o0, o1 = _nibbles(vo, DEQ)
        o2, o3 = _nibbles(vo2, DEQ)
    c0 = tl.dot(p0s, e0) + tl.dot(p1s, o0)
    c1 = tl.dot(p0s, e1) + tl.dot(p1s, o1)
    c2 = tl.dot(p0s, e2) + tl.dot(p1s, o2)
    c3 = tl.dot(p0s, e3) + tl.dot(p1s, o3)
    acc0 = acc0 * alpha[:, None] + (c0 * SC + pz[:, None]) * vsc0.to(tl.float32)[None, :]
    acc1 = acc1 * alpha[:, None] + (c1 * SC + pz[:, None]) * vsc1.to(tl.float32)[None, :]
    acc2 = acc2 * alpha[:, None] + (c2 * SC + pz[:, None]) * vsc2.to(tl.float32)[None, :]
    acc3 = acc3 * alpha[:, None] + (c3 * SC + pz[:, None]) * vsc3.to(tl.float32)[None, :]
    return m_new, l_i, acc0, acc1, acc2, acc3


@triton.jit
def _pool_v_part(p0, p1, pv, s_pg, tok, jq, valid0, valid1, CLS: tl.constexpr):
    # Rows past seq_len may hold stale or uninitialized fp16 (NaN): p is 0 there, but 0·NaN is not.
    ve = tl.load(
        pv + (2 * tok)[:, None] * s_pg + (4 * jq + CLS)[None, :], mask=valid0[:, None], other=0.0
    )
    vo = tl.load(
        pv + (2 * tok + 1)[:, None] * s_pg + (4 * jq + CLS)[None, :],
        mask=valid1[:, None],
        other=0.0,
    )
    return tl.dot(p0.to(tl.float16), ve) + tl.dot(p1.to(tl.float16), vo)


@triton.jit
def _attend_pool(
    q16, m_i, l_i, acc0, acc1, acc2, acc3, pk, pv, s_pg, first_tok, seq_len, dd, tok, jq
):
    """Online-softmax update with one fp16 pool block (the sink or an unflushed block); rows at or
    past seq_len are masked."""
    valid0 = first_tok + 2 * tok < seq_len
    valid1 = first_tok + 2 * tok + 1 < seq_len
    ke = tl.load(pk + dd[:, None] + (2 * tok)[None, :] * s_pg, mask=valid0[None, :], other=0.0)
    ko = tl.load(pk + dd[:, None] + (2 * tok + 1)[None, :] * s_pg, mask=valid1[None, :], other=0.0)
    s0 = tl.where(valid0[None, :], tl.dot(q16, ke), float("-inf"))
    s1 = tl.where(valid1[None, :], tl.dot(q16, ko), float("-inf"))
    m_new = tl.maximum(m_i, tl.maximum(tl.max(s0, axis=1), tl.max(s1, axis=1)))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # fully masked row: no NaN
    alpha = tl.exp2(m_i - m_safe)
    p0 = tl.exp2(s0 - m_safe[:, None])
    p1 = tl.exp2(s1 - m_safe[:, None])
    l_i = l_i * alpha[:, None] + (p0 + p1)
    acc0 = acc0 * alpha[:, None] + _pool_v_part(p0, p1, pv, s_pg, tok, jq, valid0, valid1, 0)
    acc1 = acc1 * alpha[:, None] + _pool_v_part(p0, p1, pv, s_pg, tok, jq, valid0, valid1, 1)
    acc2 = acc2 * alpha[:, None] + _pool_v_part(p0, p1, pv, s_pg, tok, jq, valid0, valid1, 2)
    acc3 = acc3 * alpha[:, None] + _pool_v_part(p0, p1, pv, s_pg, tok, jq, valid0, valid1, 3)
    return m_new, l_i, acc0, acc1, acc2, acc3


@triton.jit(do_not_specialize=["num_splits", "s_bt"])
def _kvarn_decode_kernel(
    q_ptr,
    s_qb,
    s_qh,  # rotated q·scale·log2e, fp32 [B, Hq, D]
    cache_u8,
    cache_f16,
    s_cb,
    s_ch,  # records; byte strides
    pool_k,
    pool_v,
    s_ps,
    s_pg,
    s_ph,  # fp16 pool [slots, G, Hkv, D]
    block_slot,
    block_table,
    s_bt,
    seq_lens,
    comp_end,
    out_ptr,
    s_ob,
    s_oh,
    s_os,  # fp32 [B, Hq, (splits,) D]
    lse_ptr,
    s_lb,
    s_lh,  # fp32 [B, Hq, splits] (split-K only)
    num_splits,
    QPK: tl.constexpr,
    QH: tl.constexpr,
    D: tl.constexpr,
    G: tl.constexpr,
    VB: tl.constexpr,
    K_CODES: tl.constexpr,
    K_SCOL: tl.constexpr,
    K_ZP: tl.constexpr,
    K_SROW: tl.constexpr,
    V_CODES: tl.constexpr,
    V_SCOL: tl.constexpr,
    V_SROW: tl.constexpr,
    V_ZP: tl.constexpr,
    IS_SPLIT: tl.constexpr,
    DEQ: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """Blocks [1, comp_end) of a request are compressed (the caller guarantees it); block 0 (the
    sink) and [comp_end, nblk) are read as the slot map says, normally from the pool. Split s takes
    a contiguous share of [1, comp_end); the last split, whose share (the remainder) is the smallest,
    also takes the rest, so the pool blocks do not lengthen the longest split. The compressed loop
    has no branch and, with PREFETCH, loads block i+1's record (and block i+2's id) while computing
    block i."""
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    D4: tl.constexpr = D // 4
    G2: tl.constexpr = G // 2

    seq_len = tl.load(seq_lens + b)
    nblk = tl.cdiv(seq_len, G)
    c_end = tl.minimum(tl.load(comp_end + b), nblk)
    n_comp = tl.maximum(c_end - 1, 0)
    per_split = tl.cdiv(n_comp, num_splits)
    start = 1 + split * per_split
    end = tl.minimum(start + per_split, 1 + n_comp)

    r = tl.arange(0, QH)
    rmask = r < QPK
    dd = tl.arange(0, D)
    jq = tl.arange(0, D4)
    tok = tl.arange(0, G2)
    q = tl.load(
        q_ptr + b * s_qb + (kvh * QPK + r)[:, None] * s_qh + dd[None, :],
        mask=rmask[:, None],
        other=0.0,
    )
    q16 = q.to(tl.float16)
    bt = block_table + b.to(tl.int64) * s_bt
    head_off = kvh * s_ch

    m_i = tl.full([QH], float("-inf"), tl.float32)
    l_i = tl.zeros([QH, G2], tl.float32)  # per-token partial sums of p
    acc0 = tl.zeros([QH, D4], tl.float32)
    acc1 = tl.zeros([QH, D4], tl.float32)
    acc2 = tl.zeros([QH, D4], tl.float32)
    acc3 = tl.zeros([QH, D4], tl.float32)

    # The sink and every block from comp_end on: normally all pool-resident (the unflushed tail), but
    # the slot map decides, so a compressed block past comp_end is still read correctly. This loop
    # is short and cold; the branch lives here, not in the compressed loop below.
    is_last = split == num_splits - 1
    n_pool = tl.where(is_last & (nblk > 0), 1 + nblk - tl.maximum(c_end, 1), 0)
    for i in range(0, n_pool):
        blk = tl.where(i == 0, 0, c_end + i - 1)
        phys = tl.load(bt + blk).to(tl.int64)
        slot = tl.load(block_slot + phys).to(tl.int64)
        if slot >= 0:
            base = slot * s_ps + kvh * s_ph
            m_i, l_i, acc0, acc1, acc2, acc3 = _attend_pool(
                q16,
                m_i,
                l_i,
                acc0,
                acc1,
                acc2,
                acc3,
                pool_k + base,
                pool_v + base,
                s_pg,
                blk * G,
                seq_len,
                dd,
                tok,
                jq,
            )
        else:
            (
                kb,
                kscol,
                kzp,
                ksr0,
                ksr1,
                ve,
                vo,
                ve2,
                vo2,
                vsr0,
                vsr1,
                vzp0,
                vzp1,
                vsc0,
                vsc1,
                vsc2,
                vsc3,
            ) = _load_record(
                cache_u8,
                cache_f16,
                phys * s_cb + head_off,
                blk < nblk,
                dd,
                tok,
                jq,
                D,
                G,
                VB,
                K_CODES,
                K_SCOL,
                K_ZP,
                K_SROW,
                V_CODES,
                V_SCOL,
                V_SROW,
                V_ZP,
            )
            m_i, l_i, acc0, acc1, acc2, acc3 = _attend_record(
                q,
                m_i,
                l_i,
                acc0,
                acc1,
                acc2,
                acc3,
                kb,
                kscol,
                kzp,
                ksr0,
                ksr1,
                ve,
                vo,
                ve2,
                vo2,
                vsr0,
                vsr1,
                vzp0,
                vzp1,
                vsc0,
                vsc1,
                vsc2,
                vsc3,
                VB,
                DEQ,
            )

    if PREFETCH:
        has0 = start < end
        phys_a = tl.load(bt + start, mask=has0, other=0).to(tl.int64)
        phys_b = tl.load(bt + start + 1, mask=start + 1 < end, other=0).to(tl.int64)
        (
            kb,
            kscol,
            kzp,
            ksr0,
            ksr1,
            ve,
            vo,
            ve2,
            vo2,
            vsr0,
            vsr1,
            vzp0,
            vzp1,
            vsc0,
            vsc1,
            vsc2,
            vsc3,
        ) = _load_record(
            cache_u8,
            cache_f16,
            phys_a * s_cb + head_off,
            has0,
            dd,
            tok,
            jq,
            D,
            G,
            VB,
            K_CODES,
            K_SCOL,
            K_ZP,
            K_SROW,
            V_CODES,
            V_SCOL,
            V_SROW,
            V_ZP,
        )
        for blk in range(start, end):
            (
                nkb,
                nkscol,
                nkzp,
                nksr0,
                nksr1,
                nve,
                nvo,
                nve2,
                nvo2,
                nvsr0,
                nvsr1,
                nvzp0,
                nvzp1,
                nvsc0,
                nvsc1,
                nvsc2,
                nvsc3,
            ) = _load_record(
                cache_u8,
                cache_f16,
                phys_b * s_cb + head_off,
                blk + 1 < end,
                dd,
                tok,
                jq,
                D,
                G,
                VB,
                K_CODES,
                K_SCOL,
                K_ZP,
                K_SROW,
                V_CODES,
                V_SCOL,
                V_SROW,
                V_ZP,
            )
            phys_b = tl.load(bt + blk + 2, mask=blk + 2 < end, other=0).to(tl.int64)
            m_i, l_i, acc0, acc1, acc2, acc3 = _attend_record(
                q,
                m_i,
                l_i,
                acc0,
                acc1,
                acc2,
                acc3,
                kb,
                kscol,
                kzp,
                ksr0,
                ksr1,
                ve,
                vo,
                ve2,
                vo2,
                vsr0,
                vsr1,
                vzp0,
                vzp1,
                vsc0,
                vsc1,
                vsc2,
                vsc3,
                VB,
                DEQ,
            )
            kb = nkb
            kscol = nkscol
            kzp = nkzp
            ksr0 = nksr0
            ksr1 = nksr1
            ve = nve
            vo = nvo
            ve2 = nve2
            vo2 = nvo2
            vsr0 = nvsr0
            vsr1 = nvsr1
            vzp0 = nvzp0
            vzp1 = nvzp1
            vsc0 = nvsc0
            vsc1 = nvsc1
            vsc2 = nvsc2
            vsc3 = nvsc3
    else:
        for blk in range(start, end):
            phys = tl.load(bt + blk).to(tl.int64)
            (
                kb,
                kscol,
                kzp,
                ksr0,
                ksr1,
                ve,
                vo,
                ve2,
                vo2,
                vsr0,
                vsr1,
                vzp0,
                vzp1,
                vsc0,
                vsc1,
                vsc2,
                vsc3,
            ) = _load_record(
                cache_u8,
                cache_f16,
                phys * s_cb + head_off,
                blk < end,
                dd,
                tok,
                jq,
                D,
                G,
                VB,
                K_CODES,
                K_SCOL,
                K_ZP,
                K_SROW,
                V_CODES,
                V_SCOL,
                V_SROW,
                V_ZP,
            )
            m_i, l_i, acc0, acc1, acc2, acc3 = _attend_record(
                q,
                m_i,
                l_i,
                acc0,
                acc1,
                acc2,
                acc3,
                kb,
                kscol,
                kzp,
                ksr0,
                ksr1,
                ve,
                vo,
                ve2,
                vo2,
                vsr0,
                vsr1,
                vzp0,
                vzp1,
                vsc0,
                vsc1,
                vsc2,
                vsc3,
                VB,
                DEQ,
            )

    l_i = tl.sum(l_i, axis=1)
    # empty row or empty split: 0, never NaN
    inv = tl.where(l_i > 0.0, 1.0 / tl.where(l_i > 0.0, l_i, 1.0), 0.0)
    o_base = out_ptr + b * s_ob + (kvh * QPK + r)[:, None] * s_oh + split * s_os
    m2 = rmask[:, None]
    tl.store(o_base + (4 * jq)[None, :], acc0 * inv[:, None], mask=m2)
    tl.store(o_base + (4 * jq + 1)[None, :], acc1 * inv[:, None], mask=m2)
    tl.store(o_base + (4 * jq + 2)[None, :], acc2 * inv[:, None], mask=m2)
    tl.store(o_base + (4 * jq + 3)[None, :], acc3 * inv[:, None], mask=m2)
    if IS_SPLIT:
        lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + b * s_lb + (kvh * QPK + r) * s_lh + split, lse, mask=rmask)


@triton.jit(do_not_specialize=["num_splits"])
def _kvarn_combine_kernel(
    part_ptr,
    s_pb,
    s_ph,
    s_ps,
    lse_ptr,
    s_lb,
    s_lh,
    out_ptr,
    s_ob,
    s_oh,
    num_splits,
    D: tl.constexpr,
    SPAD: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, SPAD)
    smask = s < num_splits
    lse = tl.load(lse_ptr + b * s_lb + h * s_lh + s, mask=smask, other=float("-inf"))
    m = tl.max(lse, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse - m_safe)  # 0 for empty splits
    tot = tl.sum(w, axis=0)
    dd = tl.arange(0, D)
    o = tl.load(
        part_ptr + b * s_pb + h * s_ph + s[:, None] * s_ps + dd[None, :],
        mask=smask[:, None],
        other=0.0,
    )
    res = tl.sum(o * w[:, None], axis=0) / tl.where(tot > 0.0, tot, 1.0)
    tl.store(out_ptr + b * s_ob + h * s_oh + dd, res)


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def choose_splits(
    batch: int, num_kv_heads: int, max_blocks: int, num_sms: int, config: KVarNConfig
) -> int:
    """Split count for a step: enough programs to fill the GPU about eight times over (short
    programs balance well), each split keeping at least 16 blocks; 1 (single stage) when split-K
    is off or there is nothing to split."""
    if not config.split_k or max_blocks <= 1:
        return 1
    if config.num_splits:
        return min(config.num_splits, config.max_splits)
    want = -(-8 * num_sms // max(1, batch * num_kv_heads))
    by_len = max(1, max_blocks // 4)
    return max(1, min(want, by_len, config.max_splits))


class DecodeWorkspace:
    """Split-K partial buffers, sized for ``max_splits`` so their strides never change (a changed
    stride could change a specialization), grown with the batch and reused."""

    def __init__(self) -> None:
        self.part: torch.Tensor | None = None
        self.lse: torch.Tensor | None = None

    def get(self, b: int, hq: int, max_splits: int, d: int, device: torch.device):
        p = self.part
        if p is None or p.shape[0] < b or p.shape[1:] != (hq, max_splits, d) or p.device != device:
            nb = max(b, p.shape[0] if p is not None else 0)
            self.part = torch.empty(nb, hq, max_splits, d, dtype=torch.float32, device=device)
            self.lse = torch.empty(nb, hq, max_splits, dtype=torch.float32, device=device)
        assert self.part is not None and self.lse is not None
        return self.part, self.lse


def compressed_end_from_slots(
    block_slot: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor, group: int
) -> torch.Tensor:
    """comp_end [B] from the slot map: 1 + the number of leading compressed blocks after the sink.
    For tests and debugging; the backend takes it from ``TwoTierBook.compressed_end``."""
    mb = block_table.shape[1]
    nblk = (seq_lens.long() + group - 1) // group
    idx = torch.arange(mb, device=block_table.device)
    comp = block_slot[block_table.long()] < 0
    comp &= (idx[None, :] >= 1) & (idx[None, :] < nblk[:, None])
    # first logical block >= 1 that is not compressed
    not_comp = (~comp) & (idx[None, :] >= 1)
    first = torch.where(not_comp, idx[None, :], torch.full_like(idx[None, :], mb)).amin(1)
    return torch.minimum(first, nblk.clamp_min(1)).to(torch.int32)


def kvarn_decode(
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
    config: KVarNConfig,
    *,
    comp_end: torch.Tensor | None = None,
    max_seq_len: int | None = None,
    num_splits: int | None = None,
    workspace: DecodeWorkspace | None = None,
    num_warps: int = 4,
    deq: int = 1,
    prefetch: bool = False,
) -> torch.Tensor:
    """Decode attention over the two-tier cache; q [B, Hq, D] un-rotated; returns [B, Hq, D] in
    q's dtype.

    ``comp_end`` int32 [B]: blocks [1, comp_end) of each request are compressed (so the hot loop
    needs no slot lookup); the sink and later blocks are read as ``block_slot`` says. Pass it when
    known (``TwoTierBook.compressed_end``); by default it is derived from ``block_slot`` on the device
    (no host sync). ``num_splits`` overrides the heuristic (1 = single stage). ``deq``/``prefetch`` pick kernel variants (fixed per deployment).
    """
    b, hq, d = q.shape
    hkv = cache.shape[1]
    if hq % hkv:
        raise ValueError(f"query heads {hq} are not a multiple of KV heads {hkv}")
    if layout.preset.k_bits != 4:
        raise ValueError(f"{layout.preset.name}: the decode kernel is built for 4-bit keys")
    if not config.fused_decode:
        from .reference import reference_decode

        return reference_decode(
            q, cache, pool_k, pool_v, block_slot, block_table, seq_lens, layout, h16, scale
        ).to(q.dtype)
    qpk = hq // hkv
    g = layout.group
    if comp_end is None:
        comp_end = compressed_end_from_slots(block_slot, block_table, seq_lens, g)
    h32 = h16.float()
    q_rot = ((q.float() @ h32) * (scale * LOG2E)).contiguous()
    if num_splits is None:
        if max_seq_len is None:
            max_seq_len = int(seq_lens.max()) if b else 0
        num_splits = choose_splits(b, hkv, -(-max_seq_len // g), _num_sms(q.device), config)
    num_splits = max(1, min(num_splits, config.max_splits))
    out = torch.empty(b, hq, d, dtype=torch.float32, device=q.device)
    if b == 0:
        return out.to(q.dtype)
    lo = layout
    common = dict(
        QPK=qpk,
        QH=max(8, triton.next_power_of_2(qpk)),  # the MMA's M side; 8 pads less than 16
        D=d,
        G=g,
        VB=lo.preset.v_bits,
        K_CODES=lo.k_codes,
        K_SCOL=lo.k_scol,
        K_ZP=lo.k_zp,
        K_SROW=lo.k_srow,
        V_CODES=lo.v_codes,
        V_SCOL=lo.v_scol,
        V_SROW=lo.v_srow,
        V_ZP=lo.v_zp,
        DEQ=2 if deq == 1 and q.is_cuda else deq,  # 2: DEQ 1's codes, unpacked 4 bytes at a time
        PREFETCH=prefetch,
        num_warps=num_warps,
    )
    if q.is_cuda and MAXNREG.get(d):
        common["maxnreg"] = MAXNREG[d]
    args = (
        q_rot,
        q_rot.stride(0),
        q_rot.stride(1),
        cache,
        cache.view(torch.float16),
        cache.stride(0),
        cache.stride(1),
        pool_k,
        pool_v,
        pool_k.stride(0),
        pool_k.stride(1),
        pool_k.stride(2),
        block_slot,
        block_table,
        block_table.stride(0),
        seq_lens,
        comp_end,
    )
    if num_splits == 1:
        _kvarn_decode_kernel[(b, hkv, 1)](
            *args, out, out.stride(0), out.stride(1), 0, out, 0, 0, 1, IS_SPLIT=False, **common
        )
    else:
        ws = workspace or DecodeWorkspace()
        part, lse = ws.get(b, hq, config.max_splits, d, q.device)
        _kvarn_decode_kernel[(b, hkv, num_splits)](
            *args,
            part,
            part.stride(0),
            part.stride(1),
            part.stride(2),
            lse,
            lse.stride(0),
            lse.stride(1),
            num_splits,
            IS_SPLIT=True,
            **common,
        )
        _kvarn_combine_kernel[(b, hq)](
            part,
            part.stride(0),
            part.stride(1),
            part.stride(2),
            lse,
            lse.stride(0),
            lse.stride(1),
            out,
            out.stride(0),
            out.stride(1),
            num_splits,
            D=d,
            SPAD=triton.next_power_of_2(config.max_splits),
            num_warps=4,
        )
    return (out @ h32).to(q.dtype)
