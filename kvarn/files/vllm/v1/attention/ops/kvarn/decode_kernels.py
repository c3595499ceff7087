"""The fused KVarN decode kernel: one program per (request, KV head[, split]) serves all its query heads.

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
  while a block is computed (``_l2_prefetch``). ``decode_words`` holds it, and says why words.
- the byte path (DEQ 0/1; DEQ 2 on CUDA): run 7's kernel, kept for comparison and tests. K nibbles
  split the tile into even and odd tokens, V crumbs split channels into four residue classes; the
  query heads are the M side, padded to 8 rows (``decode_bytes``).

Blocks [1, comp_end) (compressed) go through a branch-free hot loop; the sink and the tail go through
a short loop that follows the slot map. Split-K: stage 1 writes each split's normalized O and
log2-sum-exp, stage 2 combines (``decode_combine``: per head for small batches, 16 heads a
program otherwise). Which blocks a split reads: ``decode_shares``; q's rotation: ``decode_rotation``.
The launch (warps, splits, combine) is chosen per step from the batch and the longest context so
that about one wave of programs is resident (``choose_splits``, ``choose_warps``). Only sizes fixed for a model and
the kernel variant are constexpr, plus IS_SPLIT; batch, lengths, block table and the split count
are runtime values, and the first call compiles every variant the policy can pick (two warp counts
x single/split, both combines), so decode steps never compile.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .decode_bytes import _attend_pool, _attend_record, _load_record
from .decode_rotation import _rotate_q, _rotate_q_kron
from .decode_shares import _share_of, _shares
from .decode_words import _decode_words

LOG2E = 1.4426950408889634


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
