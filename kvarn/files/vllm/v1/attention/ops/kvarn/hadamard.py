"""The rotation: a Sylvester Hadamard matrix of size D divided by √D (symmetric, H·H = I)."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=8)
def _sylvester(d: int) -> torch.Tensor:
    if d < 1 or d & (d - 1):
        raise ValueError(f"Hadamard size {d}: must be a power of two")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / d**0.5


def hadamard(d: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
    """H [D, D] = Sylvester(D) / √D in ``dtype`` (built in float64, then cast once)."""
    return _sylvester(d).to(device=device, dtype=dtype)


def rotate(x: torch.Tensor, h16: torch.Tensor) -> torch.Tensor:
    """x·H along the last axis with the fp16 H the cache was written with, rounded to fp16.

    The product is accumulated in fp32 (as a tensor-core fp16 GEMM would) and stored as fp16, which is
    what the pool holds; decode rotates q and un-rotates o with the same ``h16``.
    """
    return (x.float() @ h16.float()).to(torch.float16)
