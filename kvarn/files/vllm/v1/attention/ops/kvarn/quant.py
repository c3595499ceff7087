"""Round-to-nearest with folded scales, bit packing, and the record encode/decode (torch reference).

The tensors here are batches of tiles: K and V arrive rotated, in fp16, as [N, G, D] (token-major, the
pool's order). The K tile is quantized as [D, G] (per channel across the tile's tokens), the V tile as
[G, D] (per token across channels).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .layout import RecordLayout
from .normalize import variance_normalize

DELTA_FLOOR = 1e-10


class RTN(NamedTuple):
    codes: torch.Tensor  # uint8 [..., R, C] in [0, 2^b − 1]
    lo: torch.Tensor  # fp32 [..., R]
    delta: torch.Tensor  # fp32 [..., R]


def rtn(b: torch.Tensor, bits: int) -> RTN:
    """Per-row asymmetric RTN; torch.round rounds half to even, as the spec asks."""
    qmax = (1 << bits) - 1
    lo = b.amin(-1)
    hi = b.amax(-1)
    delta = ((hi - lo) / qmax).clamp_min(DELTA_FLOOR)
    q = torch.round((b - lo.unsqueeze(-1)) / delta.unsqueeze(-1)).clamp(0, qmax)
    return RTN(q.to(torch.uint8), lo, delta)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack 8/bits codes per byte along the last axis, lowest index in the lowest bits."""
    if bits not in (1, 2, 4, 8):
        raise ValueError(f"bits={bits}: must divide 8")
    per = 8 // bits
    if codes.shape[-1] % per:
        raise ValueError(f"last axis {codes.shape[-1]} is not a multiple of {per} codes per byte")
    c = codes.to(torch.int32).reshape(*codes.shape[:-1], codes.shape[-1] // per, per)
    shifts = torch.arange(per, dtype=torch.int32, device=codes.device) * bits
    return (c << shifts).sum(-1).to(torch.uint8)


def unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    per = 8 // bits
    shifts = torch.arange(per, dtype=torch.int32, device=packed.device) * bits
    c = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    return c.reshape(*packed.shape[:-1], packed.shape[-1] * per).to(torch.uint8)


class KFields(NamedTuple):
    codes: torch.Tensor  # uint8 [N, D, G]
    s_col: torch.Tensor  # fp16 [N, D]
    zp: torch.Tensor  # fp16 [N, D]
    s_row: torch.Tensor  # fp16 [N, G]


class VFields(NamedTuple):
    codes: torch.Tensor  # uint8 [N, G, D]
    s_col: torch.Tensor  # fp16 [N, D]
    s_row: torch.Tensor  # fp16 [N, G]
    zp: torch.Tensor  # fp16 [N, G]


def quantize_k(k_rot: torch.Tensor, bits: int, iters: int) -> KFields:
    """k_rot [N, G, D] (rotated, fp16) -> K fields; the tile is M = kᵀ [D, G]."""
    nrm = variance_normalize(k_rot.float().transpose(-1, -2).contiguous(), iters)
    r = rtn(nrm.balanced, bits)
    row = torch.exp(nrm.log_row)  # per channel d
    return KFields(
        r.codes,
        (r.delta * row).half(),
        (r.lo * row).half(),
        torch.exp(nrm.log_col).half(),  # per token g
    )


def quantize_v(v_rot: torch.Tensor, bits: int, iters: int) -> VFields:
    """v_rot [N, G, D] (rotated, fp16) -> V fields; the tile is M = v [G, D]."""
    nrm = variance_normalize(v_rot.float(), iters)
    r = rtn(nrm.balanced, bits)
    row = torch.exp(nrm.log_row)  # per token g
    return VFields(
        r.codes,
        torch.exp(nrm.log_col).half(),  # per channel d
        (r.delta * row).half(),
        (r.lo * row).half(),
    )


def dequantize_k(f: KFields) -> torch.Tensor:
    """K̂ [N, G, D] fp32 (token-major) from K̂[d,g] = (q·s_col[d] + zp[d])·s_row[g]."""
    kd = (
        f.codes.float() * f.s_col.float().unsqueeze(-1) + f.zp.float().unsqueeze(-1)
    ) * f.s_row.float().unsqueeze(-2)
    return kd.transpose(-1, -2)


def dequantize_v(f: VFields) -> torch.Tensor:
    """V̂ [N, G, D] fp32 from V̂[g,d] = (q·s_row[g] + zp[g])·s_col[d]."""
    return (
        f.codes.float() * f.s_row.float().unsqueeze(-1) + f.zp.float().unsqueeze(-1)
    ) * f.s_col.float().unsqueeze(-2)


def _put(rec: torch.Tensor, offset: int, data: torch.Tensor) -> None:
    raw = data.contiguous().view(torch.uint8).reshape(rec.shape[0], -1)
    rec[:, offset : offset + raw.shape[1]] = raw


def _get(rec: torch.Tensor, offset: int, nbytes: int) -> torch.Tensor:
    return rec[:, offset : offset + nbytes].contiguous()


def encode(k: KFields, v: VFields, layout: RecordLayout) -> torch.Tensor:
    """Fields of N tiles -> records uint8 [N, layout.size] (padding zeroed)."""
    p = layout.preset
    n = k.codes.shape[0]
    rec = torch.zeros(n, layout.size, dtype=torch.uint8, device=k.codes.device)
    _put(rec, layout.k_codes, pack(k.codes, p.k_bits))
    _put(rec, layout.k_scol, k.s_col)
    _put(rec, layout.k_zp, k.zp)
    _put(rec, layout.k_srow, k.s_row)
    _put(rec, layout.v_codes, pack(v.codes, p.v_bits))
    _put(rec, layout.v_scol, v.s_col)
    _put(rec, layout.v_srow, v.s_row)
    _put(rec, layout.v_zp, v.zp)
    return rec


def decode(rec: torch.Tensor, layout: RecordLayout) -> tuple[KFields, VFields]:
    """Records uint8 [N, size] -> (K fields, V fields)."""
    p, d, g = layout.preset, layout.head_dim, layout.group
    n = rec.shape[0]

    def f16(off: int, count: int) -> torch.Tensor:
        return _get(rec, off, 2 * count).view(torch.float16).reshape(n, count)

    kc = unpack(_get(rec, layout.k_codes, layout.k_codes_bytes).reshape(n, d, -1), p.k_bits)
    vc = unpack(_get(rec, layout.v_codes, layout.v_codes_bytes).reshape(n, g, -1), p.v_bits)
    k = KFields(kc, f16(layout.k_scol, d), f16(layout.k_zp, d), f16(layout.k_srow, g))
    v = VFields(vc, f16(layout.v_scol, d), f16(layout.v_srow, g), f16(layout.v_zp, g))
    return k, v


def quantize_blocks(
    k_rot: torch.Tensor, v_rot: torch.Tensor, layout: RecordLayout, iters: int
) -> torch.Tensor:
    """Rotated fp16 tiles k_rot, v_rot [N, G, D] -> records uint8 [N, size]."""
    g, d = layout.group, layout.head_dim
    if k_rot.shape[-2:] != (g, d) or v_rot.shape != k_rot.shape:
        raise ValueError(
            f"{layout.preset.name}, D={d}: tiles must be [N, {g}, {d}], got K {tuple(k_rot.shape)} "
            f"and V {tuple(v_rot.shape)}"
        )
    p = layout.preset
    return encode(quantize_k(k_rot, p.k_bits, iters), quantize_v(v_rot, p.v_bits, iters), layout)


def dequantize_blocks(rec: torch.Tensor, layout: RecordLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Records [N, size] -> (K̂, V̂) [N, G, D] fp32, still in the rotated basis."""
    k, v = decode(rec, layout)
    return dequantize_k(k), dequantize_v(v)
