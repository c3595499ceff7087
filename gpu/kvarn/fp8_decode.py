"""An fp8 (e4m3) KV-cache paged decode in Triton: the opponent the spec names for KVarN at >= 32K
context. Benchmark-only code (not shipped).

Same shape of work as KVarN's fused decode: one program per (request, KV head, split) serves all the
query heads of its KV head; a block table maps logical blocks of BS tokens to physical blocks of a
cache [blocks, Hkv, BS, D] (one contiguous BS x D tile per block and head); fp8 -> fp16 in registers,
tensor-core dots, online softmax in log2 space, split-K with KVarN's combine kernel (same partial
format: normalized O and log2-sum-exp per split). Per-tensor scales k_scale / v_scale (vLLM's fp8 KV
cache). Two tile orientations: TRANS=0 is the usual one (query heads on the MMA's M side, tokens on
N); TRANS=1 puts the tokens on M and the heads on N (n = 8 is native: no M padding), as the KVarN
word path does. The benchmark times both and several warp / stage counts and keeps the fastest per
row, so the opponent is not handicapped by one choice.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kvarn_ops import triton_decode

LOG2E = 1.4426950408889634


@triton.jit(do_not_specialize=["num_splits", "s_bt"])
def _fp8_decode_kernel(
    q_ptr,
    s_qb,
    s_qh,
    k_ptr,
    v_ptr,
    s_cb,
    s_ch,
    block_table,
    s_bt,
    seq_lens,
    out_ptr,
    s_ob,
    s_oh,
    s_os,
    lse_ptr,
    s_lb,
    s_lh,
    num_splits,
    QPK: tl.constexpr,
    QH: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    IS_SPLIT: tl.constexpr,
    TRANS: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens + b)
    nblk = tl.cdiv(seq_len, BS)
    per_split = tl.cdiv(nblk, num_splits)
    start = split * per_split
    end = tl.minimum(start + per_split, nblk)
    r = tl.arange(0, QH)
    rmask = r < QPK
    dd = tl.arange(0, D)
    tok = tl.arange(0, BS)
    heads = kvh * QPK + r
    bt = block_table + b.to(tl.int64) * s_bt
    head_off = kvh * s_ch
    if TRANS:
        qT = tl.load(
            q_ptr + b * s_qb + heads[None, :] * s_qh + dd[:, None], mask=rmask[None, :], other=0.0
        ).to(tl.float16)  # [D, QH]
        m_i = tl.full([QH], float("-inf"), tl.float32)
        l_i = tl.zeros([QH], tl.float32)
        acc = tl.zeros([D, QH], tl.float32)
        for blk in range(start, end):
            phys = tl.load(bt + blk).to(tl.int64)
            base = phys * s_cb + head_off
            valid = blk * BS + tok < seq_len
            k = tl.load(k_ptr + base + tok[:, None] * D + dd[None, :]).to(tl.float16)  # [BS, D]
            s = tl.dot(k, qT)  # [BS, QH]
            s = tl.where(valid[:, None], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=0))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[None, :])
            l_i = l_i * alpha + tl.sum(p, axis=0)
            vT = tl.load(v_ptr + base + tok[None, :] * D + dd[:, None]).to(tl.float16)  # [D, BS]
            acc = acc * alpha[None, :] + tl.dot(vT, p.to(tl.float16))
            m_i = m_new
        inv = tl.where(l_i > 0.0, 1.0 / tl.where(l_i > 0.0, l_i, 1.0), 0.0)
        o = out_ptr + b * s_ob + heads[None, :] * s_oh + split * s_os + dd[:, None]
        tl.store(o, acc * inv[None, :], mask=rmask[None, :])
    else:
        q = tl.load(
            q_ptr + b * s_qb + heads[:, None] * s_qh + dd[None, :], mask=rmask[:, None], other=0.0
        ).to(tl.float16)  # [QH, D]
        m_i = tl.full([QH], float("-inf"), tl.float32)
        l_i = tl.zeros([QH], tl.float32)
        acc = tl.zeros([QH, D], tl.float32)
        for blk in range(start, end):
            phys = tl.load(bt + blk).to(tl.int64)
            base = phys * s_cb + head_off
            valid = blk * BS + tok < seq_len
            kT = tl.load(k_ptr + base + tok[None, :] * D + dd[:, None]).to(tl.float16)  # [D, BS]
            s = tl.dot(q, kT)  # [QH, BS]
            s = tl.where(valid[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_ptr + base + tok[:, None] * D + dd[None, :]).to(tl.float16)  # [BS, D]
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
            m_i = m_new
        inv = tl.where(l_i > 0.0, 1.0 / tl.where(l_i > 0.0, l_i, 1.0), 0.0)
        o = out_ptr + b * s_ob + heads[:, None] * s_oh + split * s_os + dd[None, :]
        tl.store(o, acc * inv[:, None], mask=rmask[:, None])
    if IS_SPLIT:
        lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + b * s_lb + heads * s_lh + split, lse, mask=rmask)


def fp8_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    k_scale: float,
    v_scale: float,
    num_splits: int,
    *,
    part: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    num_warps: int = 4,
    num_stages: int = 2,
    trans: bool = False,
) -> torch.Tensor:
    """q [B, Hq, D] fp16; k_cache/v_cache fp8 e4m3 [blocks, Hkv, BS, D]; returns [B, Hq, D] fp16.
    ``part``/``lse`` (split-K partials, [B, Hq, >= num_splits, D] and [B, Hq, >= num_splits] fp32)
    may be passed in so a captured graph allocates nothing."""
    b, hq, d = q.shape
    hkv, bs = k_cache.shape[1], k_cache.shape[2]
    qpk = hq // hkv
    # k_scale folds into q (S = q·(k8·k_scale)), v_scale into the output
    qs = (q.float() * (scale * LOG2E * k_scale)).contiguous()
    out = torch.empty(b, hq, d, dtype=torch.float32, device=q.device)
    common = dict(
        QPK=qpk,
        QH=max(8 if trans else 16, triton.next_power_of_2(qpk)),
        D=d,
        BS=bs,
        TRANS=trans,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    args = (
        qs,
        qs.stride(0),
        qs.stride(1),
        k_cache,
        v_cache,
        k_cache.stride(0),
        k_cache.stride(1),
        block_table,
        block_table.stride(0),
        seq_lens,
    )
    if num_splits == 1:
        _fp8_decode_kernel[(b, hkv, 1)](
            *args, out, out.stride(0), out.stride(1), 0, out, 0, 0, 1, IS_SPLIT=False, **common
        )
    else:
        if part is None or lse is None:
            part = torch.empty(b, hq, num_splits, d, dtype=torch.float32, device=q.device)
            lse = torch.empty(b, hq, num_splits, dtype=torch.float32, device=q.device)
        _fp8_decode_kernel[(b, hkv, num_splits)](
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
        triton_decode._kvarn_combine_kernel[(b, hq)](
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
            SPAD=triton.next_power_of_2(part.shape[2]),
            num_warps=4,
        )
    return (out * v_scale).to(q.dtype)


def _random_fp8(shape: tuple[int, ...], device: str) -> torch.Tensor:
    """Random e4m3 values of magnitude 2^-4 .. 1.875, either sign, never NaN, made as bytes (a
    randn of a 34 GB cache would need four times that in fp32)."""
    x = torch.randint(0x18, 0x40, shape, dtype=torch.uint8, device=device)
    sign = torch.randint(0, 2, shape, dtype=torch.uint8, device=device)
    sign <<= 7
    x |= sign
    del sign
    return x.view(torch.float8_e4m3fn)


class FP8Case:
    """A paged fp8 cache of B requests x ctx tokens (block BS, shuffled block table), random data."""

    def __init__(self, b: int, ctx: int, d: int, hq: int, hkv: int, device: str, bs: int = 128):
        nb = -(-ctx // bs)
        nblocks = b * nb
        shape = (nblocks, hkv, bs, d)
        self.k = _random_fp8(shape, device)
        self.v = _random_fp8(shape, device)
        self.table = torch.randperm(nblocks, device=device).to(torch.int32).view(b, nb)
        self.seq_lens = torch.full((b,), ctx, dtype=torch.int32, device=device)
        self.q = torch.randn(b, hq, d, device=device).half()
        self.b, self.ctx, self.d, self.hq, self.hkv, self.nb = b, ctx, d, hq, hkv, nb
        self.k_scale, self.v_scale = 0.5, 0.25
        self.nbytes = 2 * b * hkv * ctx * d  # K and V, one byte each

    def runner(self, splits: int, warps: int, stages: int, trans: bool):
        part = torch.empty(self.b, self.hq, max(splits, 1), self.d, device=self.q.device)
        lse = torch.empty(self.b, self.hq, max(splits, 1), device=self.q.device)

        def run():
            return fp8_decode(
                self.q,
                self.k,
                self.v,
                self.table,
                self.seq_lens,
                self.d**-0.5,
                self.k_scale,
                self.v_scale,
                splits,
                part=part,
                lse=lse,
                num_warps=warps,
                num_stages=stages,
                trans=trans,
            )

        return run

    def reference(self) -> torch.Tensor:
        """SDPA over the dequantized cache (small cases only: it gathers every block)."""
        import torch.nn.functional as F

        outs = []
        for i in range(self.b):
            blocks = self.table[i].long()
            k = (
                (self.k[blocks].float() * self.k_scale)
                .permute(1, 0, 2, 3)
                .reshape(self.hkv, -1, self.d)
            )
            v = (
                (self.v[blocks].float() * self.v_scale)
                .permute(1, 0, 2, 3)
                .reshape(self.hkv, -1, self.d)
            )
            n = int(self.seq_lens[i])
            qi = self.q[i].float().view(self.hkv, self.hq // self.hkv, self.d)
            outs.append(
                F.scaled_dot_product_attention(qi, k[:, :n], v[:, :n]).reshape(self.hq, self.d)
            )
        return torch.stack(outs)
