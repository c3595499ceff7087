"""The fused decode's byte path (DEQ 0/1; DEQ 2 = DEQ 1 with PTX unpack on CUDA): run 7's code,
kept for comparison and tests. A record's codes are read as bytes; K nibbles split the tile into
even and odd tokens, V crumbs split the channels into four residue classes; the query heads are
the MMA's M side, padded to 8 rows. The word path (``decode_words``) is the default."""

from __future__ import annotations

import triton
import triton.language as tl


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
