"""q's rotation in the decode kernel's prologue: qT = (q·H)^T · q_scale, the cache's Hadamard
rotation applied to the query instead of by a GEMM launched before the kernel. ``_rotate_q`` reads
H (any D); ``_rotate_q_kron`` computes the same product at D = 256 without reading H, from H's
Kronecker structure (the decode kernel picks it there)."""

from __future__ import annotations

import triton
import triton.language as tl


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
