"""Presets and the byte layout of one KVarN record (one KV-cache block × one KV head).

Pure Python (no torch), so the vLLM backend can size its cache from it cheaply.

Record fields, back to back, padded at the end to a multiple of lcm(8, G):

    K codes  [D, G] (rows = channels, 8/kb codes per byte along G, lowest index in the lowest bits)
    K s_col  fp16[D]    K zp fp16[D]    K s_row fp16[G]
    V codes  [G, D] (rows = tokens, 8/vb codes per byte along D)
    V s_col  fp16[D]    V s_row fp16[G]    V zp fp16[G]

Dequantization: K̂[d,g] = (q·s_colK[d] + zpK[d])·s_rowK[g];  V̂[g,d] = (q·s_rowV[g] + zpV[g])·s_colV[d].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SUPPORTED_HEAD_DIMS = (128, 256)


@dataclass(frozen=True)
class Preset:
    name: str
    k_bits: int
    v_bits: int
    group: int  # G: tokens per tile, equal to the vLLM block size


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("kvarn_k4v2_g128", 4, 2, 128),
        Preset("kvarn_k4v4_g128", 4, 4, 128),
        Preset("kvarn_k4v2_g64", 4, 2, 64),
        Preset("kvarn_k4v4_g64", 4, 4, 64),
    )
}
DEFAULT_PRESET = "kvarn_k4v2_g128"


class KVarNLayoutError(ValueError):
    """An unknown preset or an unsupported head size; the message names both and the choices."""


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise KVarNLayoutError(
            f"unknown KVarN cache dtype {name!r}; choose one of {', '.join(sorted(PRESETS))}"
        ) from None


@dataclass(frozen=True)
class RecordLayout:
    """Byte offsets (from the record start) and sizes of every field, for one preset and head size."""

    preset: Preset
    head_dim: int
    k_codes: int
    k_scol: int
    k_zp: int
    k_srow: int
    v_codes: int
    v_scol: int
    v_srow: int
    v_zp: int
    payload: int  # bytes used before padding
    size: int  # padded record size

    @property
    def group(self) -> int:
        return self.preset.group

    @property
    def k_codes_bytes(self) -> int:
        return self.head_dim * self.group * self.preset.k_bits // 8

    @property
    def v_codes_bytes(self) -> int:
        return self.group * self.head_dim * self.preset.v_bits // 8

    @property
    def bytes_per_token_head(self) -> float:
        return self.size / self.group

    def constexprs(self) -> dict[str, int]:
        """The sizes and field offsets the Triton kernels take as constexprs, by their names there."""
        p = self.preset
        return {
            "D": self.head_dim,
            "G": self.group,
            "KB": p.k_bits,
            "VB": p.v_bits,
            "K_CODES": self.k_codes,
            "K_SCOL": self.k_scol,
            "K_ZP": self.k_zp,
            "K_SROW": self.k_srow,
            "V_CODES": self.v_codes,
            "V_SCOL": self.v_scol,
            "V_SROW": self.v_srow,
            "V_ZP": self.v_zp,
        }

    def fields(self) -> dict[str, tuple[int, int]]:
        """name -> (offset, size in bytes), in record order."""
        d, g = self.head_dim, self.group
        return {
            "k_codes": (self.k_codes, self.k_codes_bytes),
            "k_scol": (self.k_scol, 2 * d),
            "k_zp": (self.k_zp, 2 * d),
            "k_srow": (self.k_srow, 2 * g),
            "v_codes": (self.v_codes, self.v_codes_bytes),
            "v_scol": (self.v_scol, 2 * d),
            "v_srow": (self.v_srow, 2 * g),
            "v_zp": (self.v_zp, 2 * g),
        }


def record_layout(preset: Preset | str, head_dim: int) -> RecordLayout:
    p = get_preset(preset) if isinstance(preset, str) else preset
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise KVarNLayoutError(
            f"{p.name}: head_dim {head_dim} is not supported; KVarN needs one of "
            f"{SUPPORTED_HEAD_DIMS} (a power-of-two Hadamard size the kernels are built for)"
        )
    d, g = head_dim, p.group
    off = 0
    k_codes = off
    off += d * g * p.k_bits // 8
    k_scol = off
    off += 2 * d
    k_zp = off
    off += 2 * d
    k_srow = off
    off += 2 * g
    v_codes = off
    off += g * d * p.v_bits // 8
    v_scol = off
    off += 2 * d
    v_srow = off
    off += 2 * g
    v_zp = off
    off += 2 * g
    align = math.lcm(8, g)
    size = -(-off // align) * align
    return RecordLayout(
        p, d, k_codes, k_scol, k_zp, k_srow, v_codes, v_scol, v_srow, v_zp, off, size
    )


def cache_bytes_per_token_layer(preset: Preset | str, head_dim: int, num_kv_heads: int) -> float:
    """Compressed bytes per token per layer (K and V together), for capacity planning."""
    return record_layout(preset, head_dim).bytes_per_token_head * num_kv_heads
