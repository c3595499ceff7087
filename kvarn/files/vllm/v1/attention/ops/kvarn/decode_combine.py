"""Split-K's second stage: merge each request's split outputs by their log2-sum-exp weights. Three
kernels: ``_kvarn_combine_kernel`` (merge only, no rotation: gpu/kvarn/fp8_decode.py's),
``_kvarn_combine_rot_kernel`` (16 query heads a program, un-rotates o·H and casts; large batches)
and ``_kvarn_combine_head_rot_kernel`` (one head and a slice of output channels a program; small
batches). The rotating ones read only the live splits of ``decode_shares._shares``."""

from __future__ import annotations

import triton
import triton.language as tl

from .decode_shares import _shares


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
