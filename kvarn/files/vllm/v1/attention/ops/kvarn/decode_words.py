"""The fused decode's word path (DEQ 3, and DEQ 4 = DEQ 3 with PTX unpack on CUDA), the default:
``_decode_words`` walks a split's compressed blocks and pool items with the codes read as int16
words, and writes the split's normalized output (and log2-sum-exp when split). Why words, and how
the planes map to tokens and channels: the section comment below."""

from __future__ import annotations

import triton
import triton.language as tl

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
