"""The fused KVarN decode's Triton kernels: one program per (request, KV head[, split]) serves all its query heads.

Per block the program reads either the fp16 pool slot (sink, unflushed tail) or the record, and
never materializes K̂ or V̂: the scales fold into the small operands instead,

    S[h,g] = s_rowK[g]·(Σ_d (q[h,d]·s_colK[d])·code[d,g] + Σ_d q[h,d]·zpK[d])
    O[h,d] = s_colV[d]·(Σ_g (p[h,g]·s_rowV[g])·code[g,d] + Σ_g p[h,g]·zpV[g])

so the only per-element work on the codes is unpack + convert, and both products are tensor-core
dots on fp16 codes. The convert is integer-only: a code's bits reinterpreted as an fp16 subnormal
are exactly c·2^-24 (or c·2^(k-24) for a code left at bit k), and the dot is scaled back.

Two code paths read the same record (``deq``):

- the word path (DEQ 3; DEQ 4 on CUDA, with PTX unpack), the default: codes are read as int16
  words, which shared memory hands to the MMA fragments with ldmatrix (the record packs codes
  along the MMA's non-reduction axis, so byte tiles would reach the fragments one byte at a time);
  planes are masked in place (no shifts below bit 10); every tile is transposed so tokens or
  channel words are the MMA's M side and the query heads its N side (n = 8: nothing padded);
  one warp per program at D=128, two at D=256 (small dots only replicate work over more warps),
  twice that for a batch that leaves the GPU idle; the zero-point sums are reductions inside the
  score tile's own layout; q is rotated in the prologue (``_rotate_q``) and split-K's combine
  un-rotates and casts, so a step is two launches; the next block's record is prefetched into L2
  while a block is computed (``_l2_prefetch``). See the section comment above ``_NIB16_ASM``.
- the byte path (DEQ 0/1; DEQ 2 on CUDA): run 7's kernel, kept for comparison and tests. K nibbles
  split the tile into even and odd tokens, V crumbs split channels into four residue classes; the
  query heads are the M side, padded to 8 rows.

Blocks [1, comp_end) (compressed) go through a branch-free hot loop; the sink and the tail go through
a short loop that follows the slot map. Split-K: stage 1 writes each split's normalized O and
log2-sum-exp, stage 2 combines (per head for small batches, 16 heads a program otherwise). The launch
(warps, splits, combine) is chosen per step from the batch and the longest context so that about one
wave of programs is resident (``choose_splits``, ``choose_warps``). Only sizes fixed for a model and
the kernel variant are constexpr, plus IS_SPLIT; batch, lengths, block table and the split count
are runtime values, and the first call compiles every variant the policy can pick (two warp counts
x single/split, both combines), so decode steps never compile.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = 1.4426950408889634
# What a pool block (fp16, 4G·D bytes for K and V) costs against a record when splits are balanced;
# each half of it (``_share_of``) half that.
POOL_COST = tl.constexpr(4)
# The fewest units (records) a split of a request takes before another split does. A launch fixed
# for 128K (a captured step) gave a request of 8K 128 splits of half a block at D=256, each
# rotating q through all of H (run 61: 26 us against 20 for 16 splits, the combine over 128 splits
# 9.8 us against 4.2), so a short request takes only the splits its length fills. 2, not 4, since
# the pool blocks are read in halves and q is rotated without H (runs 82-83: D 256 batch 1 8K,
# 35 splits of 2 units, decode kernel 20.9 -> 13.7 us; every row of the probe faster).
MIN_SPLIT_UNITS = tl.constexpr(2)


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


# ----------------------------------------------------------------------------------------------
# The word path (DEQ 3, and DEQ 4 = DEQ 3 with PTX unpack on CUDA): codes are read as int16 words.
# Why: the record packs codes along the MMA's non-reduction axis (K along tokens, V along channels),
# while an MMA fragment pairs elements along the reduction axis, so byte tiles reach the fragments
# one byte at a time (LDS.U8 + byte assembly: ~60% of the byte path's hot loop). A 16-bit element
# is what ldmatrix moves: the word tile goes from shared memory to the fragments transposed in one
# instruction per 16 bytes, each 32-bit register holding the words of two reduction-adjacent rows.
# A shift and a mask then give one fp16x2 operand per code plane (both halves at once). Plane p of
# the K words holds tokens 4w + p (a word is 4 tokens of one channel); plane c of the V words holds
# channels NPL·w + c (a word is 8 two-bit or 4 four-bit channels of one token), so the scores come
# in four token planes and the output in NPL channel planes, written back through the same map.
# Both zero-point terms are dots against the zero points broadcast along the other axis, which
# lands them in the accumulators' layout without a cross-warp sum.
# ----------------------------------------------------------------------------------------------
# fp16 mantissa bits are 0-9, so a code masked in place at bits 0-9 is still an exact subnormal,
# worth code·2^(shift-24): the plane's dot is scaled back by its own power of two
# instead of shifting every code down. Only the codes above bit 9 take one shift by 8 per word.
_NIB16_ASM = tl.constexpr(
    "{.reg .b32 t, u;\n"
    "mov.b32 t, $4;\n"
    "shr.u32 u, t, 8;\n"
    "and.b32 $0, t, 0x000F000F;\n"
    "and.b32 $1, t, 0x00F000F0;\n"
    "and.b32 $2, u, 0x000F000F;\n"
    "and.b32 $3, u, 0x00F000F0;}"
)
_CRUMB16_ASM = tl.constexpr(
    "{.reg .b32 t, u;\n"
    "mov.b32 t, $8;\n"
    "shr.u32 u, t, 8;\n"
    "and.b32 $0, t, 0x00030003;\n"
    "and.b32 $1, t, 0x000C000C;\n"
    "and.b32 $2, t, 0x00300030;\n"
    "and.b32 $3, t, 0x00C000C0;\n"
    "and.b32 $4, t, 0x03000300;\n"
    "and.b32 $5, u, 0x000C000C;\n"
    "and.b32 $6, u, 0x00300030;\n"
    "and.b32 $7, u, 0x00C000C0;}"
)


@triton.jit
def _sub16(x):
    return x.to(tl.int16).to(tl.float16, bitcast=True)


@triton.jit
def _nib16(w, DEQ: tl.constexpr):
    """int16 words -> their four 4-bit codes (bits 0-3 first) as fp16 subnormals, each masked in
    place: c·2^-24, c·2^-20, then the high byte's two likewise."""
    if DEQ == 4:
        a, b, c, d = tl.inline_asm_elementwise(
            _NIB16_ASM,
            "=r,=r,=r,=r,r",
            [w],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16),
            is_pure=True,
            pack=2,
        )
        return a, b, c, d
    else:
        u = w >> 8
        return _sub16(w & 0xF), _sub16(w & 0xF0), _sub16(u & 0xF), _sub16(u & 0xF0)


@triton.jit
def _crumb16(w, DEQ: tl.constexpr):
    """int16 words -> their eight 2-bit codes (bits 0-1 first) as fp16 subnormals masked in place:
    code i is worth c·2^(2i-24) for i < 5 and c·2^(2i-32) for i >= 5 (taken from the word >> 8)."""
    if DEQ == 4:
        c0, c1, c2, c3, c4, c5, c6, c7 = tl.inline_asm_elementwise(
            _CRUMB16_ASM,
            "=r,=r,=r,=r,=r,=r,=r,=r,r",
            [w],
            dtype=(
                tl.float16,
                tl.float16,
                tl.float16,
                tl.float16,
                tl.float16,
                tl.float16,
                tl.float16,
                tl.float16,
            ),
            is_pure=True,
            pack=2,
        )
        return c0, c1, c2, c3, c4, c5, c6, c7
    else:
        u = w >> 8
        return (
            _sub16(w & 0x3),
            _sub16(w & 0xC),
            _sub16(w & 0x30),
            _sub16(w & 0xC0),
            _sub16(w & 0x300),
            _sub16(u & 0xC),
            _sub16(u & 0x30),
            _sub16(u & 0xC0),
        )


@triton.jit
def _bcast(ptr, has, R: tl.constexpr, C: tl.constexpr, ALONG_ROWS: tl.constexpr):
    """fp16 vector at ptr (a gather) broadcast to [R, C]: along the rows (value per column) or
    along the columns (value per row)."""
    v = tl.load(ptr, mask=has, other=0.0)
    if ALONG_ROWS:
        return tl.broadcast_to(v[None, :], (R, C))
    else:
        return tl.broadcast_to(v[:, None], (R, C))


@triton.jit
def _pv_sum(ps0, ps1, ps2, ps3, e0, e1, e2, e3):
    """Σ over the four token planes of (channel plane tile)·P: [channels, heads]."""
    t = tl.dot(e0, ps0)
    t = tl.dot(e1, ps1, t)
    t = tl.dot(e2, ps2, t)
    return tl.dot(e3, ps3, t)


@triton.jit
def _v_plane(acc, al, ps0, ps1, ps2, ps3, e0, e1, e2, e3, pz, vc, has, F: tl.constexpr):
    """One channel plane's online update, transposed ([channels, heads]): Σ over the four token
    planes of codes·P, scaled by F (2^24 over the plane's place value), plus the zero-point term,
    times s_colV."""
    t = _pv_sum(ps0, ps1, ps2, ps3, e0, e1, e2, e3)
    vsc = tl.load(vc, mask=has, other=0.0).to(tl.float32)[:, None]
    return acc * al + (t * F + pz) * vsc


@triton.jit
def _v_words(f16, w4, wv, p, has, VW: tl.constexpr, V_CODES: tl.constexpr):
    """V code words of the tokens 4·w4 + p, transposed: int16 [VW, G/4]."""
    x = tl.load(f16 + V_CODES // 2 + (4 * w4 + p)[None, :] * VW + wv[:, None], mask=has, other=0.0)
    return x.to(tl.int16, bitcast=True)


@triton.jit
def _attend_words(
    qT,
    q16T,
    m_i,
    l_i,
    acc0,
    acc1,
    acc2,
    acc3,
    acc4,
    acc5,
    acc6,
    acc7,
    cache_f16,
    rec,
    has,
    dd,
    w4,
    wv,
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
    DEQ: tl.constexpr,
):
    """Online-softmax update with one compressed block, word path (see the section comment). All
    tiles are transposed: scores [G/4 tokens, QH], accumulators [channels, QH], so the codes are
    the MMA's M side and the few query heads its N side (n = 8 is native: nothing padded)."""
    G4: tl.constexpr = G // 4
    VW: tl.constexpr = D * VB // 16
    NPL: tl.constexpr = 16 // VB
    f16 = cache_f16 + rec // 2
    # [G/4, D]: read transposed (no tl.trans: the tile must reach the MMA as words, not planes)
    kw = tl.load(f16 + K_CODES // 2 + dd[None, :] * G4 + w4[:, None], mask=has, other=0.0)
    kscol = tl.load(f16 + K_SCOL // 2 + dd, mask=has, other=0.0)
    ks = K_SROW // 2 + 4 * w4
    ks0 = tl.load(f16 + ks, mask=has, other=0.0).to(tl.float32)[:, None]
    ks1 = tl.load(f16 + ks + 1, mask=has, other=0.0).to(tl.float32)[:, None]
    ks2 = tl.load(f16 + ks + 2, mask=has, other=0.0).to(tl.float32)[:, None]
    ks3 = tl.load(f16 + ks + 3, mask=has, other=0.0).to(tl.float32)[:, None]

    qsT = (qT * kscol.to(tl.float32)[:, None]).to(tl.float16)  # [D, QH]
    kzp = tl.load(f16 + K_ZP // 2 + dd, mask=has, other=0.0).to(tl.float32)
    qz = tl.sum(qT * kzp[:, None], axis=0)[None, :]  # Σ_d q·zpK[d] per head
    k0, k1, k2, k3 = _nib16(kw.to(tl.int16, bitcast=True), DEQ)
    s0 = (tl.dot(k0, qsT) * 16777216.0 + qz) * ks0
    s1 = (tl.dot(k1, qsT) * 1048576.0 + qz) * ks1  # codes at bits 4-7: c·2^-20
    s2 = (tl.dot(k2, qsT) * 16777216.0 + qz) * ks2
    s3 = (tl.dot(k3, qsT) * 1048576.0 + qz) * ks3
    m_new = tl.maximum(m_i, tl.max(tl.maximum(tl.maximum(s0, s1), tl.maximum(s2, s3)), axis=0))
    alpha = tl.exp2(m_i - m_new)[None, :]  # m_new is finite: a compressed block has G tokens
    p0 = tl.exp2(s0 - m_new[None, :])
    p1 = tl.exp2(s1 - m_new[None, :])
    p2 = tl.exp2(s2 - m_new[None, :])
    p3 = tl.exp2(s3 - m_new[None, :])
    l_i = l_i * alpha + ((p0 + p1) + (p2 + p3))  # [G/4, QH]: reduced after the loop

    vr = V_SROW // 2 + 4 * w4
    vz = V_ZP // 2 + 4 * w4
    # Σ_g p·zpV[g] per head: a reduction along the tokens, inside the score tile's own layout
    pz = p0 * tl.load(f16 + vz, mask=has, other=0.0).to(tl.float32)[:, None]
    pz += p1 * tl.load(f16 + vz + 1, mask=has, other=0.0).to(tl.float32)[:, None]
    pz += p2 * tl.load(f16 + vz + 2, mask=has, other=0.0).to(tl.float32)[:, None]
    pz += p3 * tl.load(f16 + vz + 3, mask=has, other=0.0).to(tl.float32)[:, None]
    pz = tl.sum(pz, axis=0)[None, :]
    ps0 = (p0 * tl.load(f16 + vr, mask=has, other=0.0).to(tl.float32)[:, None]).to(tl.float16)
    ps1 = (p1 * tl.load(f16 + vr + 1, mask=has, other=0.0).to(tl.float32)[:, None]).to(tl.float16)
    ps2 = (p2 * tl.load(f16 + vr + 2, mask=has, other=0.0).to(tl.float32)[:, None]).to(tl.float16)
    ps3 = (p3 * tl.load(f16 + vr + 3, mask=has, other=0.0).to(tl.float32)[:, None]).to(tl.float16)
    vw0 = _v_words(f16, w4, wv, 0, has, VW, V_CODES)
    vw1 = _v_words(f16, w4, wv, 1, has, VW, V_CODES)
    vw2 = _v_words(f16, w4, wv, 2, has, VW, V_CODES)
    vw3 = _v_words(f16, w4, wv, 3, has, VW, V_CODES)
    vc = f16 + V_SCOL // 2 + NPL * wv
    if VB == 2:
        a0, a1, a2, a3, a4, a5, a6, a7 = _crumb16(vw0, DEQ)
        b0, b1, b2, b3, b4, b5, b6, b7 = _crumb16(vw1, DEQ)
        c0, c1, c2, c3, c4, c5, c6, c7 = _crumb16(vw2, DEQ)
        d0, d1, d2, d3, d4, d5, d6, d7 = _crumb16(vw3, DEQ)
        acc0 = _v_plane(acc0, alpha, ps0, ps1, ps2, ps3, a0, b0, c0, d0, pz, vc, has, 16777216.0)
        acc1 = _v_plane(acc1, alpha, ps0, ps1, ps2, ps3, a1, b1, c1, d1, pz, vc + 1, has, 4194304.0)
        acc2 = _v_plane(acc2, alpha, ps0, ps1, ps2, ps3, a2, b2, c2, d2, pz, vc + 2, has, 1048576.0)
        acc3 = _v_plane(acc3, alpha, ps0, ps1, ps2, ps3, a3, b3, c3, d3, pz, vc + 3, has, 262144.0)
        acc4 = _v_plane(acc4, alpha, ps0, ps1, ps2, ps3, a4, b4, c4, d4, pz, vc + 4, has, 65536.0)
        acc5 = _v_plane(acc5, alpha, ps0, ps1, ps2, ps3, a5, b5, c5, d5, pz, vc + 5, has, 4194304.0)
        acc6 = _v_plane(acc6, alpha, ps0, ps1, ps2, ps3, a6, b6, c6, d6, pz, vc + 6, has, 1048576.0)
        acc7 = _v_plane(acc7, alpha, ps0, ps1, ps2, ps3, a7, b7, c7, d7, pz, vc + 7, has, 262144.0)
    else:
        a0, a1, a2, a3 = _nib16(vw0, DEQ)
        b0, b1, b2, b3 = _nib16(vw1, DEQ)
        c0, c1, c2, c3 = _nib16(vw2, DEQ)
        d0, d1, d2, d3 = _nib16(vw3, DEQ)
        acc0 = _v_plane(acc0, alpha, ps0, ps1, ps2, ps3, a0, b0, c0, d0, pz, vc, has, 16777216.0)
        acc1 = _v_plane(acc1, alpha, ps0, ps1, ps2, ps3, a1, b1, c1, d1, pz, vc + 1, has, 1048576.0)
        acc2 = _v_plane(
            acc2, alpha, ps0, ps1, ps2, ps3, a2, b2, c2, d2, pz, vc + 2, has, 16777216.0
        )
        acc3 = _v_plane(acc3, alpha, ps0, ps1, ps2, ps3, a3, b3, c3, d3, pz, vc + 3, has, 1048576.0)
    return m_new, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7


@triton.jit
def _halves(x):
    """[R, C, 2k] -> the even and the odd entries of the last axis, [R, C, k] each."""
    return tl.split(tl.reshape(x, (x.shape[0], x.shape[1], x.shape[2] // 2, 2)))


@triton.jit
def _pool_planes(pv, s_pg, w4, wv, p, valid, NPL: tl.constexpr):
    """The pool's V rows 4·w4 + p as NPL channel planes [VW, G/4] (plane c: channels NPL·w + c),
    read with the NPL channels of a word contiguous (one vector load) and split in registers.
    Rows past seq_len may hold stale or uninitialized fp16 (NaN): p is 0 there, but 0·NaN is not."""
    c = tl.arange(0, NPL)
    x = tl.load(
        pv + (4 * w4 + p)[None, :, None] * s_pg + (NPL * wv)[:, None, None] + c[None, None, :],
        mask=valid[None, :, None],
        other=0.0,
    )
    if NPL == 8:
        e, o = _halves(x)  # c = 2a + k
        ee, eo = _halves(e)
        oe, oo = _halves(o)
        x0, x4 = tl.split(ee)
        x2, x6 = tl.split(eo)
        x1, x5 = tl.split(oe)
        x3, x7 = tl.split(oo)
        return x0, x1, x2, x3, x4, x5, x6, x7
    else:
        e, o = _halves(x)
        x0, x2 = tl.split(e)
        x1, x3 = tl.split(o)
        return x0, x1, x2, x3, x0, x1, x2, x3


@triton.jit
def _pool_pv_plane(
    acc0,
    acc1,
    acc2,
    acc3,
    acc4,
    acc5,
    acc6,
    acc7,
    pv,
    s_pg,
    w4,
    wv,
    p,
    valid,
    pp,
    NPL: tl.constexpr,
):
    """Adds the pool's token plane p (probabilities pp [G/4, QH]) to the channel planes."""
    x0, x1, x2, x3, x4, x5, x6, x7 = _pool_planes(pv, s_pg, w4, wv, p, valid, NPL)
    acc0 = tl.dot(x0, pp, acc0)
    acc1 = tl.dot(x1, pp, acc1)
    acc2 = tl.dot(x2, pp, acc2)
    acc3 = tl.dot(x3, pp, acc3)
    if NPL == 8:
        acc4 = tl.dot(x4, pp, acc4)
        acc5 = tl.dot(x5, pp, acc5)
        acc6 = tl.dot(x6, pp, acc6)
        acc7 = tl.dot(x7, pp, acc7)
    return acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7


@triton.jit
def _pool_s(q16T, pk, s_pg, dd, w4, p, valid):
    k = tl.load(pk + (4 * w4 + p)[:, None] * s_pg + dd[None, :], mask=valid[:, None], other=0.0)
    return tl.where(valid[:, None], tl.dot(k, q16T), float("-inf"))


@triton.jit
def _attend_pool_words(
    q16T,
    m_i,
    l_i,
    acc0,
    acc1,
    acc2,
    acc3,
    acc4,
    acc5,
    acc6,
    acc7,
    pk,
    pv,
    s_pg,
    first_tok,
    seq_len,
    dd,
    w4,
    wv,
    half,
    NPL: tl.constexpr,
):
    """Online-softmax update with half of one fp16 pool block in the word path's planes
    (transposed): the token planes 2·half and 2·half + 1 (tokens 4w + 2·half + {0, 1}); rows at or
    past seq_len are masked."""
    pa = 2 * half
    v0 = first_tok + 4 * w4 + pa < seq_len
    v1 = first_tok + 4 * w4 + pa + 1 < seq_len
    s0 = _pool_s(q16T, pk, s_pg, dd, w4, pa, v0)
    s1 = _pool_s(q16T, pk, s_pg, dd, w4, pa + 1, v1)
    m_new = tl.maximum(m_i, tl.max(tl.maximum(s0, s1), axis=0))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # fully masked row: no NaN
    al = tl.exp2(m_i - m_safe)[None, :]
    p0 = tl.exp2(s0 - m_safe[None, :])
    p1 = tl.exp2(s1 - m_safe[None, :])
    l_i = l_i * al + (p0 + p1)
    p0 = p0.to(tl.float16)
    p1 = p1.to(tl.float16)
    # one token plane at a time, so only its NPL channel tiles are live
    x0, x1, x2, x3, x4, x5, x6, x7 = _pool_planes(pv, s_pg, w4, wv, pa, v0, NPL)
    acc0 = tl.dot(x0, p0, acc0 * al)
    acc1 = tl.dot(x1, p0, acc1 * al)
    acc2 = tl.dot(x2, p0, acc2 * al)
    acc3 = tl.dot(x3, p0, acc3 * al)
    if NPL == 8:
        acc4 = tl.dot(x4, p0, acc4 * al)
        acc5 = tl.dot(x5, p0, acc5 * al)
        acc6 = tl.dot(x6, p0, acc6 * al)
        acc7 = tl.dot(x7, p0, acc7 * al)
    acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = _pool_pv_plane(
        acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7, pv, s_pg, w4, wv, pa + 1, v1, p1, NPL
    )
    return m_new, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7


# The bulk L2 prefetch of sm_90 (one instruction moves a whole record, up to ~25 KB, into L2 and
# holds no register): thread 0 of the program issues it when the flag is set. The word path cannot
# double-buffer a record in registers (a D=128 K tile alone is 128 registers a thread at one warp),
# so this is how the next blocks' bytes travel from HBM while the current block is computed.
_L2_PREFETCH_ASM = tl.constexpr(
    "{.reg .pred p, q;\n"
    ".reg .b32 t;\n"
    "mov.u32 t, %tid.x;\n"
    "setp.eq.u32 p, t, 0;\n"
    "setp.ne.and.b32 q, $2, 0, p;\n"
    "@q cp.async.bulk.prefetch.L2.global [$1], $3;\n"
    "mov.b32 $0, 0;}"
)


@triton.jit
def _l2_prefetch(cache_f16, rec, ok, REC: tl.constexpr):
    """Starts moving the record at byte offset ``rec`` (REC bytes, a multiple of 16) into L2 when
    ``ok``; returns at once."""
    one = tl.zeros([1], tl.int64)
    addr = (cache_f16 + (rec // 2 + one)).to(tl.int64)
    tl.inline_asm_elementwise(
        _L2_PREFETCH_ASM,
        "=r,l,r,r",
        [addr, ok.to(tl.int32) + one.to(tl.int32), REC + one.to(tl.int32)],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _decode_words(
    qT,
    cache_f16,
    head_off,
    s_cb,
    pool_k,
    pool_v,
    s_ps,
    s_pg,
    s_ph,
    block_slot,
    bt,
    seq_len,
    nblk,
    c_end,
    start,
    end,
    k_lo,
    k_hi,
    tail_blk,
    kvh,
    out_heads,
    lse_base,
    rmask,
    IS_SPLIT: tl.constexpr,
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
    DEQ: tl.constexpr,
    L2PF: tl.constexpr,
    REC: tl.constexpr,
):
    """The whole decode of one program in the word path; writes O (and the log2-sum-exp). ``qT``
    [D, QH] is the rotated q·scale·log2e; ``out_heads`` [QH] points at channel 0 of each query
    head's output row. L2PF > 0: the compressed blocks are prefetched into L2 that many blocks
    ahead (the first L2PF before the pool blocks are read), REC bytes each."""
    G4: tl.constexpr = G // 4
    VW: tl.constexpr = D * VB // 16
    NPL: tl.constexpr = 16 // VB
    dd = tl.arange(0, D)
    w4 = tl.arange(0, G4)
    wv = tl.arange(0, VW)
    q16T = qT.to(tl.float16)
    m_i = tl.full([QH], float("-inf"), tl.float32)
    l_i = tl.zeros([G4, QH], tl.float32)  # per-token partial sums of p
    acc0 = tl.zeros([VW, QH], tl.float32)
    acc1 = tl.zeros([VW, QH], tl.float32)
    acc2 = tl.zeros([VW, QH], tl.float32)
    acc3 = tl.zeros([VW, QH], tl.float32)
    acc4 = tl.zeros([VW, QH], tl.float32)  # acc4-7: VB == 2 only (eight channel planes)
    acc5 = tl.zeros([VW, QH], tl.float32)
    acc6 = tl.zeros([VW, QH], tl.float32)
    acc7 = tl.zeros([VW, QH], tl.float32)

    if L2PF > 0:
        for j in tl.static_range(L2PF):
            pj = tl.load(bt + start + j, mask=start + j < end, other=0).to(tl.int64)
            _l2_prefetch(cache_f16, pj * s_cb + head_off, start + j < end, REC)
        # the id of the block prefetched next, loaded one iteration before it is needed
        pf_next = tl.load(bt + start + L2PF, mask=start + L2PF < end, other=0).to(tl.int64)
    for k in range(k_lo, k_hi):
        # pool items: the sink's two halves, then each tail block's (``_share_of``)
        blk = tl.where(k < 2, 0, tail_blk + (k - 2) // 2)
        half = k % 2
        phys = tl.load(bt + blk).to(tl.int64)
        slot = tl.load(block_slot + phys).to(tl.int64)
        if slot >= 0:
            base = slot * s_ps + kvh * s_ph
            m_i, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = _attend_pool_words(
                q16T,
                m_i,
                l_i,
                acc0,
                acc1,
                acc2,
                acc3,
                acc4,
                acc5,
                acc6,
                acc7,
                pool_k + base,
                pool_v + base,
                s_pg,
                blk * G,
                seq_len,
                dd,
                w4,
                wv,
                half,
                NPL,
            )
        elif half == 0:  # a record where the pool would be: read whole by its first half's owner
            m_i, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = _attend_words(
                qT,
                q16T,
                m_i,
                l_i,
                acc0,
                acc1,
                acc2,
                acc3,
                acc4,
                acc5,
                acc6,
                acc7,
                cache_f16,
                phys * s_cb + head_off,
                blk < nblk,
                dd,
                w4,
                wv,
                QH,
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
                DEQ,
            )
    for blk in range(start, end):
        if L2PF > 0:
            _l2_prefetch(cache_f16, pf_next * s_cb + head_off, blk + L2PF < end, REC)
            nxt = blk + L2PF + 1
            pf_next = tl.load(bt + nxt, mask=nxt < end, other=0).to(tl.int64)
        phys = tl.load(bt + blk).to(tl.int64)
        m_i, l_i, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = _attend_words(
            qT,
            q16T,
            m_i,
            l_i,
            acc0,
            acc1,
            acc2,
            acc3,
            acc4,
            acc5,
            acc6,
            acc7,
            cache_f16,
            phys * s_cb + head_off,
            blk < end,
            dd,
            w4,
            wv,
            QH,
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
            DEQ,
        )

    l_i = tl.sum(l_i, axis=0)
    # empty row or empty split: 0, never NaN
    inv = tl.where(l_i > 0.0, 1.0 / tl.where(l_i > 0.0, l_i, 1.0), 0.0)[None, :]
    m2 = rmask[None, :]
    o = out_heads[None, :] + NPL * wv[:, None]  # [VW, QH]: channel NPL·w of each head
    tl.store(o, acc0 * inv, mask=m2)
    tl.store(o + 1, acc1 * inv, mask=m2)
    tl.store(o + 2, acc2 * inv, mask=m2)
    tl.store(o + 3, acc3 * inv, mask=m2)
    if NPL == 8:
        tl.store(o + 4, acc4 * inv, mask=m2)
        tl.store(o + 5, acc5 * inv, mask=m2)
        tl.store(o + 6, acc6 * inv, mask=m2)
        tl.store(o + 7, acc7 * inv, mask=m2)
    if IS_SPLIT:
        lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
        tl.store(lse_base, lse, mask=rmask)


@triton.jit
def _rotate_q(q_row, s_qh, h_ptr, q_scale, heads, hmask, D: tl.constexpr):
    """qT [D, QH] = (q·H)^T · q_scale for the program's query heads, as H·q^T (H is symmetric):
    the cache's rotation done in the prologue instead of by a GEMM launched before the kernel. KC
    channels of q and columns of H at a time, so no [D, D] operand is live at once; fp16
    operands, fp32 sums (q is fp16 or bf16, H the fp16 one the cache was written with)."""
    KC: tl.constexpr = 64
    dd = tl.arange(0, D)
    kk = tl.arange(0, KC)
    acc = tl.zeros([D, heads.shape[0]], tl.float32)
    for k0 in tl.static_range(0, D, KC):
        hk = tl.load(h_ptr + dd[:, None] * D + (k0 + kk)[None, :])
        qk = tl.load(
            q_row + heads[None, :] * s_qh + (k0 + kk)[:, None], mask=hmask[None, :], other=0.0
        )
        acc = tl.dot(hk, qk.to(tl.float16), acc)
    return acc * q_scale


@triton.jit
def _sylvester(i, j):
    """Sylvester's Hadamard matrix at rows i and columns j (4-bit indices): (-1)^popcount(i & j),
    fp16 [len(i), len(j)]."""
    x = i[:, None] & j[None, :]
    x = x ^ (x >> 2)
    x = x ^ (x >> 1)
    return (1 - 2 * (x & 1)).to(tl.float16)


@triton.jit
def _hi_lo(x):
    """x (fp32) as two fp16 tiles whose sum is x to ~22 bits, joined along a new last axis."""
    hi = x.to(tl.float16)
    return tl.join(hi, (x - hi.to(tl.float32)).to(tl.float16))


@triton.jit
def _rotate_q_kron(
    q_row, s_qh, q_scale, head0, QPK: tl.constexpr, QH: tl.constexpr, D: tl.constexpr
):
    """qT [D, QH] = (q·H)^T · q_scale as ``_rotate_q`` gives it (in the same layout: its last step
    is a dot of the same shape), without reading H. H is Sylvester's (``hadamard.py``), so at
    D = 256 H = H16 ⊗ H16 / 16, and a head's q·H is H16 · Q · H16 / 16 with Q its q as a 16 x 16
    matrix (channel 16a + b at [a, b]): two dots of K = 16, then a dot with a 0/1 selection that
    lands q·H in the loop's layout (fp32 sums carried through fp16 operands as hi/lo pairs: exact
    to ~2^-22). Every program reading 128 KB of H through L2 took 4.4 us of a batch-1 program and
    8-9 us where 512 programs read it at once; this prologue 2.0 and 3.5 us (probe_timeline, runs
    81-83; H [D, D] is read only at D = 128, where it is 32 KB)."""
    tl.static_assert(D == 256, "the Kronecker rotation is for D = 256 (16 x 16)")
    c16 = tl.arange(0, 16)
    r = tl.arange(0, QH * 16)  # rows (head h, a)
    q = tl.load(
        q_row + (head0 + r // 16)[:, None] * s_qh + (16 * (r % 16))[:, None] + c16[None, :],
        mask=(r // 16 < QPK)[:, None],
        other=0.0,
    )
    # Y[(h, a), b'] = sum_b Q[a, b] H16[b, b']
    y = tl.dot(q.to(tl.float16), _sylvester(c16, c16))
    # Z[(h, b'), a'] = sum_a Y[(h, a), b'] H16[a, a'], Y as [(h, b'), (hi|lo, a)]
    yt = tl.permute(tl.reshape(y, (QH, 16, 16)), (0, 2, 1))
    yhl = tl.reshape(tl.permute(_hi_lo(tl.reshape(yt, (QH * 16, 16))), (0, 2, 1)), (QH * 16, 32))
    z = tl.dot(yhl, _sylvester(tl.arange(0, 32) % 16, c16))
    # qT[(a', b'), h] = Z[(h, b'), a'], through [(a', b'), (h, hi|lo)] x the selection [(h, hi|lo), h]
    x = tl.reshape(tl.permute(tl.reshape(z, (QH, 16, 16)), (2, 1, 0)), (D, QH))
    k = tl.arange(0, 2 * QH)
    sel = tl.where((k // 2)[:, None] == tl.arange(0, QH)[None, :], 1.0, 0.0).to(tl.float16)
    return tl.dot(tl.reshape(_hi_lo(x), (D, 2 * QH)), sel) * (q_scale / 16.0)


@triton.jit
def _shares(seq_len, comp_end, num_splits, G: tl.constexpr):
    """How a request's blocks are shared among the splits of a launch: (blocks, comp_end clamped,
    compressed blocks, tail blocks, the sink's units, units per split, live splits). The shares are
    cut on a line of POOL_COST units (the sink), one unit per compressed block, then POOL_COST units
    per tail block (each pool block is ~4.6x a record's bytes in fp16); split s of the live ones
    takes units [s·per, (s+1)·per): the compressed blocks there, and the pool blocks' halves whose
    units start there (``_share_of``), so at 2 units a split the sink and each tail block are read by
    two programs (one program reading a whole pool block was the critical path of batch 1 at 8K:
    17 us against 21 for 4 records, run 81). Only the first ``live`` splits take a share, each at
    least MIN_SPLIT_UNITS: a launch fixed for the longest context (a captured step) runs a short
    request on as few splits as a launch sized for it would, and the combine reads those only (the
    decode and the combines call this with the same values, so they agree)."""
    nblk = tl.cdiv(seq_len, G)
    c_end = tl.minimum(comp_end, nblk)
    n_comp = tl.maximum(c_end - 1, 0)
    n_tail_all = tl.maximum(nblk - tl.maximum(c_end, 1), 0)
    sink_units = tl.where(nblk > 0, POOL_COST, 0)
    units = sink_units + n_comp + POOL_COST * n_tail_all
    live = tl.minimum(num_splits, tl.maximum(tl.cdiv(units, MIN_SPLIT_UNITS), 1))
    per_split = tl.cdiv(units, live)
    return nblk, c_end, n_comp, n_tail_all, sink_units, per_split, live


@triton.jit
def _items_before(x, nblk, n_comp, n_tail_all):
    """How many pool items start before unit x of ``_shares``' line (see ``_share_of``)."""
    HALF: tl.constexpr = POOL_COST // 2
    n_items = tl.where(nblk > 0, 2 + 2 * n_tail_all, 0)
    sink = tl.where(x > 0, 1, 0) + tl.where(x > HALF, 1, 0)
    tail = tl.cdiv(tl.maximum(x - POOL_COST - n_comp, 0), HALF)
    return tl.minimum(sink + tail, n_items)


@triton.jit
def _share_of(split, nblk, n_comp, n_tail_all, sink_units, per_split, live):
    """What live split ``split`` reads, (start, end, k_lo, k_hi): the compressed blocks [start,
    end) and the pool items [k_lo, k_hi). Item 0 and 1 are the sink's halves, 2j and 2j + 1 tail
    block j's, on the line of ``_shares`` at units 0 and POOL_COST/2 (the sink) and sink + n_comp
    + POOL_COST/2·(k - 2) (the tail); a compressed block or an item is read by the split its unit
    falls in (the last live split takes what is past the end). At 2 units a split the sink's
    halves go to splits 0 and 1 and a tail block's to two neighbours, so no program reads a whole
    pool block alone."""
    u0 = split * per_split - sink_units
    start = 1 + tl.minimum(tl.maximum(u0, 0), n_comp)
    # (the last live split's end is 1 + n_comp: live x per_split covers every unit)
    end = 1 + tl.minimum(tl.maximum(u0 + per_split, 0), n_comp)
    # the items lie on the line in order (sink halves at 0 and HALF, tail halves from POOL_COST +
    # n_comp on, HALF apart), so a split's are those that start in [lo, hi): [before(lo), before(hi))
    k_lo = _items_before(split * per_split, nblk, n_comp, n_tail_all)
    k_hi = _items_before(
        tl.where(split == live - 1, 1 << 30, (split + 1) * per_split), nblk, n_comp, n_tail_all
    )
    return start, end, k_lo, k_hi


@triton.jit(do_not_specialize=["num_splits", "s_bt"])
def _kvarn_decode_kernel(
    q_ptr,
    s_qb,
    s_qh,  # q [B, Hq, D]: the caller's (ROT_Q), else rotated q·scale·log2e in fp32
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
    h_ptr,
    q_scale,  # ROT_Q: q is the caller's, rotated here (fp16 H [D, D]) and scaled by q_scale
    out_ptr,
    s_ob,
    s_oh,  # fp32 [B x splits, Hq, D]: row b·splits + split
    lse_ptr,
    s_lb,
    s_lh,  # fp32 [B x splits, Hq] (split-K only)
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
    ROT_Q: tl.constexpr,
    L2PF: tl.constexpr,
    REC: tl.constexpr,
):
    """Blocks [1, comp_end) of a request are compressed (the caller guarantees it); block 0 (the
    sink) and [comp_end, nblk) are read as the slot map says, normally from the pool. The splits
    share the blocks as ``_shares`` says; a split past the live ones returns at once, writing
    nothing. The compressed loop has no branch and, with PREFETCH, loads block i+1's record (and
    block i+2's id) while computing block i."""
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    D4: tl.constexpr = D // 4
    G2: tl.constexpr = G // 2

    seq_len = tl.load(seq_lens + b)
    nblk, c_end, n_comp, n_tail_all, sink_units, per_split, live = _shares(
        seq_len, tl.load(comp_end + b), num_splits, G
    )
    if split >= live:  # a launch sized for a longer context: nothing here, none of it combined
        return
    start, end, k_lo, k_hi = _share_of(split, nblk, n_comp, n_tail_all, sink_units, per_split, live)
    tail_blk = tl.maximum(c_end, 1)

    r = tl.arange(0, QH)
    rmask = r < QPK
    dd = tl.arange(0, D)
    jq = tl.arange(0, D4)
    tok = tl.arange(0, G2)
    if ROT_Q:
        tl.static_assert(DEQ >= 3, "q is rotated in the kernel on the word path only")
        if D == 256:
            qT = _rotate_q_kron(q_ptr + b * s_qb, s_qh, q_scale, kvh * QPK, QPK, QH, D)
        else:
            qT = _rotate_q(q_ptr + b * s_qb, s_qh, h_ptr, q_scale, kvh * QPK + r, rmask, D)
    else:
        q = tl.load(
            q_ptr + b * s_qb + (kvh * QPK + r)[:, None] * s_qh + dd[None, :],
            mask=rmask[:, None],
            other=0.0,
        )
        q16 = q.to(tl.float16)
        qT = tl.trans(q)  # [D, QH]
    bt = block_table + b.to(tl.int64) * s_bt
    head_off = kvh * s_ch

    # the partials of a step are packed: row b·num_splits + split (no room kept for splits unused)
    row = (b * num_splits + split).to(tl.int64)
    o_base = out_ptr + row * s_ob + (kvh * QPK + r)[:, None] * s_oh
    if DEQ >= 3:
        _decode_words(
            qT,
            cache_f16,
            head_off,
            s_cb,
            pool_k,
            pool_v,
            s_ps,
            s_pg,
            s_ph,
            block_slot,
            bt,
            seq_len,
            nblk,
            c_end,
            start,
            end,
            k_lo,
            k_hi,
            tail_blk,
            kvh,
            out_ptr + row * s_ob + (kvh * QPK + r) * s_oh,
            lse_ptr + row * s_lb + (kvh * QPK + r) * s_lh,
            rmask,
            IS_SPLIT,
            QH,
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
            DEQ,
            L2PF,
            REC,
        )
    else:
        m_i = tl.full([QH], float("-inf"), tl.float32)
        l_i = tl.zeros([QH, G2], tl.float32)  # per-token partial sums of p
        acc0 = tl.zeros([QH, D4], tl.float32)
        acc1 = tl.zeros([QH, D4], tl.float32)
        acc2 = tl.zeros([QH, D4], tl.float32)
        acc3 = tl.zeros([QH, D4], tl.float32)

        # The sink and every block from comp_end on: normally all pool-resident (the unflushed tail), but
        # the slot map decides, so a compressed block past comp_end is still read correctly. This loop
        # is short and cold; the branch lives here, not in the compressed loop below.
        # the byte path reads a pool item's block whole, at its first half (``_share_of``)
        for k in range((k_lo + 1) // 2 * 2, k_hi, 2):
            blk = tl.where(k < 2, 0, tail_blk + (k - 2) // 2)
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
        m2 = rmask[:, None]
        tl.store(o_base + (4 * jq)[None, :], acc0 * inv[:, None], mask=m2)
        tl.store(o_base + (4 * jq + 1)[None, :], acc1 * inv[:, None], mask=m2)
        tl.store(o_base + (4 * jq + 2)[None, :], acc2 * inv[:, None], mask=m2)
        tl.store(o_base + (4 * jq + 3)[None, :], acc3 * inv[:, None], mask=m2)
        if IS_SPLIT:
            lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
            tl.store(lse_ptr + row * s_lb + (kvh * QPK + r) * s_lh, lse, mask=rmask)


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


@triton.jit(do_not_specialize=["num_splits"])
def _kvarn_combine_rot_kernel(
    part_ptr,
    s_pb,
    s_ph,
    lse_ptr,
    s_lb,
    s_lh,
    out_ptr,
    s_ob,
    s_oh,
    seq_lens,
    comp_end,
    h_ptr,
    n_heads,
    num_splits,
    D: tl.constexpr,
    G: tl.constexpr,
    SPAD: tl.constexpr,
    HB: tl.constexpr,
):
    """Merges the splits of HB query heads of one request, un-rotates them (o·H, H fp16 [D, D]) and
    writes them in out's dtype: the caller's product and cast (two launches a step) fold in here,
    and H is read once per HB heads, not once per head."""
    b = tl.program_id(0)
    hh = tl.program_id(1) * HB + tl.arange(0, HB)
    hm = hh < n_heads
    s = tl.arange(0, SPAD)
    r0 = (b * num_splits).to(tl.int64)  # the request's first partial row
    live = _shares(tl.load(seq_lens + b), tl.load(comp_end + b), num_splits, G)[-1]
    lse = tl.load(
        lse_ptr + (r0 + s[None, :]) * s_lb + hh[:, None] * s_lh,
        mask=hm[:, None] & (s[None, :] < live),
        other=float("-inf"),
    )
    m = tl.max(lse, axis=1)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse - m_safe[:, None])  # [HB, SPAD]; 0 for empty splits
    tot = tl.sum(w, axis=1)
    dd = tl.arange(0, D)
    acc = tl.zeros([HB, D], tl.float32)
    for sp in range(0, live):
        # this split's weight, reloaded (an L1 hit): picking it out of w costs a reduction over
        # SPAD per split
        ls = tl.load(lse_ptr + (r0 + sp) * s_lb + hh * s_lh, mask=hm, other=float("-inf"))
        ws = tl.exp2(ls - m_safe)
        o = tl.load(
            part_ptr + (r0 + sp) * s_pb + hh[:, None] * s_ph + dd[None, :],
            mask=hm[:, None],
            other=0.0,
        )
        acc += ws[:, None] * o
    # fp16 operands (the output is fp16 too): an fp32 [HB, D] operand does not fit the registers
    # at D = 256; the rounding adds ~2e-4 relative, against 1e-3 allowed between split and single
    res = (acc / tl.where(tot > 0.0, tot, 1.0)[:, None]).to(tl.float16)
    jj = tl.arange(0, 64)
    for j0 in tl.static_range(0, D, 64):  # 64 output channels at a time: H slices stay small
        hc = tl.load(h_ptr + dd[:, None] * D + (j0 + jj)[None, :])
        rot = tl.dot(res, hc)
        tl.store(
            out_ptr + b * s_ob + hh[:, None] * s_oh + (j0 + jj)[None, :], rot, mask=hm[:, None]
        )


@triton.jit(do_not_specialize=["num_splits"])
def _kvarn_combine_head_rot_kernel(
    part_ptr,
    s_pb,
    s_ph,
    lse_ptr,
    s_lb,
    s_lh,
    out_ptr,
    s_ob,
    s_oh,
    seq_lens,
    comp_end,
    h_ptr,
    num_splits,
    D: tl.constexpr,
    G: tl.constexpr,
    SPAD: tl.constexpr,
    SC: tl.constexpr,
    JB: tl.constexpr,
):
    """The un-rotating combine for one (request, query head, JB output channels), what small
    batches take: SC splits are read at once (the 16-head program walks its splits one at a time,
    a serial chain of loads a batch of 1 waits on), and the product with H is a row reduction,
    out[j] = sum_d H[j, d] o[d] (H is symmetric, so that is o·H), which stays inside a warp. Each
    of the D / JB programs of a head merges all of its splits again (from L2): it is the serial
    walk over H's rows that a batch of one would wait on, not the merge."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    jb = tl.program_id(2) * JB
    s = tl.arange(0, SPAD)
    r0 = (b * num_splits).to(tl.int64)  # the request's first partial row
    live = _shares(tl.load(seq_lens + b), tl.load(comp_end + b), num_splits, G)[-1]
    lse = tl.load(lse_ptr + (r0 + s) * s_lb + h * s_lh, mask=s < live, other=float("-inf"))
    m = tl.max(lse, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    tot = tl.sum(tl.exp2(lse - m_safe), axis=0)  # 0 for empty splits
    dd = tl.arange(0, D)
    sc = tl.arange(0, SC)
    acc = tl.zeros([D], tl.float32)
    for s0 in range(0, live, SC):
        sm = s0 + sc < live
        ls = tl.load(lse_ptr + (r0 + s0 + sc) * s_lb + h * s_lh, mask=sm, other=float("-inf"))
        o = tl.load(
            part_ptr + (r0 + s0 + sc)[:, None] * s_pb + h * s_ph + dd[None, :],
            mask=sm[:, None],
            other=0.0,
        )
        acc += tl.sum(o * tl.exp2(ls - m_safe)[:, None], axis=0)
    res = acc / tl.where(tot > 0.0, tot, 1.0)
    # all JB rows of H at once (run 79: in 4096-value chunks each chunk's loads waited on the last
    # one's reduction; D 256 batch 8, 8K, this kernel 11.4 -> 9.7 us, batch 1 128K 10.2 -> 8.1)
    jj = tl.arange(0, JB)
    hr = tl.load(h_ptr + (jb + jj)[:, None] * D + dd[None, :]).to(tl.float32)
    tl.store(out_ptr + b * s_ob + h * s_oh + jb + jj, tl.sum(hr * res[None, :], axis=1))
