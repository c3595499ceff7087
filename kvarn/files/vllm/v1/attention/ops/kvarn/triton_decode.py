"""The fused KVarN decode: one program per (request, KV head[, split]) serves all its query heads.

Per block the program reads either the fp16 pool slot (sink, unflushed tail) or the record, and
never materializes K̂ or V̂: the scales fold into the small operands instead,

    S[h,g] = s_rowK[g]·(Σ_d (q[h,d]·s_colK[d])·code[d,g] + Σ_d q[h,d]·zpK[d])
    O[h,d] = s_colV[d]·(Σ_g (p[h,g]·s_rowV[g])·code[g,d] + Σ_g p[h,g]·zpV[g])

so the only per-element work on the codes is unpack + convert, and both products are tensor-core
dots on fp16 codes. Packed bytes are never interleaved back: K nibbles split the tile into even and
odd tokens (two score halves), V codes split channels into four residue classes d = 4j + i (four
accumulators), and the output is written back through the same permutation.

Split-K: stage 1 writes each split's normalized O and log2-sum-exp, stage 2 combines. Only sizes fixed
for a model are constexpr (plus IS_SPLIT: two variants in all); batch, lengths, block table and the
split count are runtime values, so decode steps never recompile.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .config import KVarNConfig
from .layout import RecordLayout

LOG2E = 1.4426950408889634


@triton.jit
def _v_codes(rec_u8, rows, jq, D: tl.constexpr, VB: tl.constexpr, V_CODES: tl.constexpr):
    """V codes of ``rows`` split by channel class: c_i[t, j] = code[rows[t], 4j + i], as fp16."""
    BYTES_ROW: tl.constexpr = D * VB // 8
    base = rec_u8 + V_CODES + rows[:, None] * BYTES_ROW
    if VB == 2:  # one byte holds channels 4j..4j+3
        by = tl.load(base + jq[None, :])
        c0 = by & 3
        c1 = (by >> 2) & 3
        c2 = (by >> 4) & 3
        c3 = by >> 6
    else:  # VB == 4: bytes 2j and 2j+1 hold channels 4j..4j+3
        ba = tl.load(base + 2 * jq[None, :])
        bb = tl.load(base + 2 * jq[None, :] + 1)
        c0 = ba & 15
        c1 = ba >> 4
        c2 = bb & 15
        c3 = bb >> 4
    return c0.to(tl.float16), c1.to(tl.float16), c2.to(tl.float16), c3.to(tl.float16)


@triton.jit
def _pool_v_part(p0, p1, pv, s_pg, tok, jq, valid0, valid1, CLS: tl.constexpr):
    # Rows past seq_len may hold stale or uninitialized fp16 (NaN): p is 0 there, but 0·NaN is not.
    ve = tl.load(
        pv + (2 * tok)[:, None] * s_pg + (4 * jq + CLS)[None, :], mask=valid0[:, None], other=0.0
    )
    vo = tl.load(
        pv + (2 * tok + 1)[:, None] * s_pg + (4 * jq + CLS)[None, :], mask=valid1[:, None], other=0.0
    )
    return tl.dot(p0.to(tl.float16), ve) + tl.dot(p1.to(tl.float16), vo)


@triton.jit(do_not_specialize=["num_splits", "s_bt"])
def _kvarn_decode_kernel(
    q_ptr,
    s_qb,
    s_qh,  # rotated q·scale·log2e, fp32 [B, Hq, D]
    cache_u8,
    cache_f16,
    s_cb,
    s_ch,  # records, bytes strides
    pool_k,
    pool_v,
    s_ps,
    s_pg,
    s_ph,  # fp16 pool [slots, G, Hkv, D]
    block_slot,
    block_table,
    s_bt,
    seq_lens,
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
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    D4: tl.constexpr = D // 4
    G2: tl.constexpr = G // 2

    seq_len = tl.load(seq_lens + b)
    nblk = tl.cdiv(seq_len, G)
    per_split = tl.cdiv(nblk, num_splits)
    start = split * per_split
    end = tl.minimum(start + per_split, nblk)

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

    m_i = tl.full([QH], float("-inf"), tl.float32)
    l_i = tl.zeros([QH], tl.float32)
    acc0 = tl.zeros([QH, D4], tl.float32)
    acc1 = tl.zeros([QH, D4], tl.float32)
    acc2 = tl.zeros([QH, D4], tl.float32)
    acc3 = tl.zeros([QH, D4], tl.float32)

    for blk in range(start, end):
        phys = tl.load(block_table + b.to(tl.int64) * s_bt + blk).to(tl.int64)
        slot = tl.load(block_slot + phys)
        t0 = blk * G + 2 * tok
        valid0 = t0 < seq_len
        valid1 = (t0 + 1) < seq_len
        if slot >= 0:
            pk = pool_k + slot.to(tl.int64) * s_ps + kvh * s_ph
            ke = tl.load(
                pk + dd[:, None] + (2 * tok)[None, :] * s_pg, mask=valid0[None, :], other=0.0
            )
            ko = tl.load(
                pk + dd[:, None] + (2 * tok + 1)[None, :] * s_pg, mask=valid1[None, :], other=0.0
            )
            s0 = tl.dot(q16, ke)
            s1 = tl.dot(q16, ko)
        else:
            rec_u8 = cache_u8 + phys * s_cb + kvh * s_ch
            rec_f16 = cache_f16 + (phys * s_cb + kvh * s_ch) // 2
            scol = tl.load(rec_f16 + K_SCOL // 2 + dd).to(tl.float32)
            zp = tl.load(rec_f16 + K_ZP // 2 + dd).to(tl.float32)
            qs = (q * scol[None, :]).to(tl.float16)
            qz = tl.sum(q * zp[None, :], axis=1)
            kb = tl.load(rec_u8 + K_CODES + dd[:, None] * G2 + tok[None, :])  # [D, G/2]
            c0 = (kb & 15).to(tl.float16)
            c1 = (kb >> 4).to(tl.float16)
            sr0 = tl.load(rec_f16 + K_SROW // 2 + 2 * tok).to(tl.float32)
            sr1 = tl.load(rec_f16 + K_SROW // 2 + 2 * tok + 1).to(tl.float32)
            s0 = (tl.dot(qs, c0) + qz[:, None]) * sr0[None, :]
            s1 = (tl.dot(qs, c1) + qz[:, None]) * sr1[None, :]
        s0 = tl.where(valid0[None, :], s0, float("-inf"))
        s1 = tl.where(valid1[None, :], s1, float("-inf"))
        m_new = tl.maximum(m_i, tl.maximum(tl.max(s0, axis=1), tl.max(s1, axis=1)))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # fully masked row: no NaN
        alpha = tl.exp2(m_i - m_safe)
        p0 = tl.exp2(s0 - m_safe[:, None])
        p1 = tl.exp2(s1 - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p0, axis=1) + tl.sum(p1, axis=1)
        m_i = m_new
        if slot >= 0:
            pv = pool_v + slot.to(tl.int64) * s_ps + kvh * s_ph
            acc0 = acc0 * alpha[:, None] + _pool_v_part(
                p0, p1, pv, s_pg, tok, jq, valid0, valid1, 0
            )
            acc1 = acc1 * alpha[:, None] + _pool_v_part(
                p0, p1, pv, s_pg, tok, jq, valid0, valid1, 1
            )
            acc2 = acc2 * alpha[:, None] + _pool_v_part(
                p0, p1, pv, s_pg, tok, jq, valid0, valid1, 2
            )
            acc3 = acc3 * alpha[:, None] + _pool_v_part(
                p0, p1, pv, s_pg, tok, jq, valid0, valid1, 3
            )
        else:
            rec_u8 = cache_u8 + phys * s_cb + kvh * s_ch
            rec_f16 = cache_f16 + (phys * s_cb + kvh * s_ch) // 2
            vs0 = tl.load(rec_f16 + V_SROW // 2 + 2 * tok).to(tl.float32)
            vs1 = tl.load(rec_f16 + V_SROW // 2 + 2 * tok + 1).to(tl.float32)
            vz0 = tl.load(rec_f16 + V_ZP // 2 + 2 * tok).to(tl.float32)
            vz1 = tl.load(rec_f16 + V_ZP // 2 + 2 * tok + 1).to(tl.float32)
            pz = tl.sum(p0 * vz0[None, :], axis=1) + tl.sum(p1 * vz1[None, :], axis=1)
            p0s = (p0 * vs0[None, :]).to(tl.float16)
            p1s = (p1 * vs1[None, :]).to(tl.float16)
            sc0 = tl.load(rec_f16 + V_SCOL // 2 + 4 * jq).to(tl.float32)
            sc1 = tl.load(rec_f16 + V_SCOL // 2 + 4 * jq + 1).to(tl.float32)
            sc2 = tl.load(rec_f16 + V_SCOL // 2 + 4 * jq + 2).to(tl.float32)
            sc3 = tl.load(rec_f16 + V_SCOL // 2 + 4 * jq + 3).to(tl.float32)
            e0, e1, e2, e3 = _v_codes(rec_u8, 2 * tok, jq, D, VB, V_CODES)
            o0, o1, o2, o3 = _v_codes(rec_u8, 2 * tok + 1, jq, D, VB, V_CODES)
            acc0 = (
                acc0 * alpha[:, None]
                + (tl.dot(p0s, e0) + tl.dot(p1s, o0) + pz[:, None]) * sc0[None, :]
            )
            acc1 = (
                acc1 * alpha[:, None]
                + (tl.dot(p0s, e1) + tl.dot(p1s, o1) + pz[:, None]) * sc1[None, :]
            )
            acc2 = (
                acc2 * alpha[:, None]
                + (tl.dot(p0s, e2) + tl.dot(p1s, o2) + pz[:, None]) * sc2[None, :]
            )
            acc3 = (
                acc3 * alpha[:, None]
                + (tl.dot(p0s, e3) + tl.dot(p1s, o3) + pz[:, None]) * sc3[None, :]
            )

    inv = tl.where(
        l_i > 0.0, 1.0 / tl.where(l_i > 0.0, l_i, 1.0), 0.0
    )  # empty row or empty split: 0, never NaN
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
    """Split count for a step: enough programs to fill the GPU about four times over, each split
    keeping at least 8 blocks; 1 (single stage) when the batch already fills it or split-K is off."""
    if not config.split_k or max_blocks <= 1:
        return 1
    if config.num_splits:
        return min(config.num_splits, config.max_splits)
    want = -(-4 * num_sms // max(1, batch * num_kv_heads))
    by_len = max(1, max_blocks // 8)
    return max(1, min(want, by_len, config.max_splits))


class DecodeWorkspace:
    """Split-K partial buffers, grown on demand and reused (no per-step allocation at steady state)."""

    def __init__(self) -> None:
        self.part: torch.Tensor | None = None
        self.lse: torch.Tensor | None = None

    def get(self, b: int, hq: int, splits: int, d: int, device: torch.device):
        if (
            self.part is None
            or self.part.shape[0] < b
            or self.part.shape[1] != hq
            or self.part.shape[2] < splits
            or self.part.device != device
        ):
            nb = max(b, self.part.shape[0] if self.part is not None else 0)
            ns = max(splits, self.part.shape[2] if self.part is not None else 0)
            self.part = torch.empty(nb, hq, ns, d, dtype=torch.float32, device=device)
            self.lse = torch.empty(nb, hq, ns, dtype=torch.float32, device=device)
        assert self.lse is not None
        return self.part, self.lse


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
    max_seq_len: int | None = None,
    num_splits: int | None = None,
    workspace: DecodeWorkspace | None = None,
    num_warps: int = 4,
) -> torch.Tensor:
    """Decode attention over the two-tier cache; q [B, Hq, D] un-rotated; returns [B, Hq, D] in
    q's dtype. ``num_splits`` overrides the heuristic (1 = single stage)."""
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
        QH=max(16, triton.next_power_of_2(qpk)),
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
        num_warps=num_warps,
    )
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
    )
    if num_splits == 1:
        _kvarn_decode_kernel[(b, hkv, 1)](
            *args, out, out.stride(0), out.stride(1), 0, out, 0, 0, 1, IS_SPLIT=False, **common
        )
    else:
        ws = workspace or DecodeWorkspace()
        part, lse = ws.get(b, hq, num_splits, d, q.device)
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
