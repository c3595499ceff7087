"""Two-axis variance normalization of fp32 tiles (specs/kvarn.md, "Variance normalization").

For a tile M [R, C]: log-scales ℓ_c [C] and ℓ_r [R] start at 0 and cur = M / e^ℓc / e^ℓr. One
iteration is a column step, ℓ_c ← clip(ℓ_c + ln clamp(σ_col(cur), 1e-3, 1e3), −0.3, 10), then a row
step likewise for ℓ_r (σ unbiased, cur recomputed after each step). After each full iteration the
imbalance I(cur) = max σ_col / max(min σ_col, 1e-8) + max σ_row / max(min σ_row, 1e-8) is compared with
the best seen so far (the initial candidate is M with unit scales); a tie takes the later iterate.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

STD_CLAMP = (1e-3, 1e3)
LOG_CLIP = (-0.3, 10.0)
IMBALANCE_FLOOR = 1e-8


class Normalized(NamedTuple):
    balanced: torch.Tensor  # [..., R, C] = M / e^ℓc / e^ℓr at the best iterate
    log_col: torch.Tensor  # [..., C]
    log_row: torch.Tensor  # [..., R]
    imbalance: torch.Tensor  # [...]


def apply_scales(m: torch.Tensor, log_col: torch.Tensor, log_row: torch.Tensor) -> torch.Tensor:
    return m / torch.exp(log_col).unsqueeze(-2) / torch.exp(log_row).unsqueeze(-1)


def imbalance(x: torch.Tensor) -> torch.Tensor:
    s_col = x.std(dim=-2, unbiased=True)
    s_row = x.std(dim=-1, unbiased=True)
    return s_col.amax(-1) / s_col.amin(-1).clamp_min(IMBALANCE_FLOOR) + s_row.amax(-1) / s_row.amin(
        -1
    ).clamp_min(IMBALANCE_FLOOR)


def variance_normalize(m: torch.Tensor, iters: int) -> Normalized:
    """Normalize a batch of fp32 tiles [..., R, C]; each tile keeps its own best iterate."""
    if m.dtype != torch.float32:
        raise TypeError(f"variance_normalize needs float32 tiles, got {m.dtype}")
    if iters < 0:
        raise ValueError(f"iters={iters}: must be >= 0")
    lc = torch.zeros(m.shape[:-2] + m.shape[-1:], dtype=m.dtype, device=m.device)
    lr = torch.zeros(m.shape[:-1], dtype=m.dtype, device=m.device)
    best_lc, best_lr, best_i = lc.clone(), lr.clone(), imbalance(m)
    for _ in range(iters):
        cur = apply_scales(m, lc, lr)
        s = cur.std(dim=-2, unbiased=True).clamp(*STD_CLAMP)
        lc = (lc + torch.log(s)).clamp(*LOG_CLIP)
        cur = apply_scales(m, lc, lr)
        s = cur.std(dim=-1, unbiased=True).clamp(*STD_CLAMP)
        lr = (lr + torch.log(s)).clamp(*LOG_CLIP)
        i = imbalance(apply_scales(m, lc, lr))
        take = i <= best_i  # ties take the later iterate
        best_i = torch.where(take, i, best_i)
        best_lc = torch.where(take.unsqueeze(-1), lc, best_lc)
        best_lr = torch.where(take.unsqueeze(-1), lr, best_lr)
    return Normalized(apply_scales(m, best_lc, best_lr), best_lc, best_lr, best_i)
