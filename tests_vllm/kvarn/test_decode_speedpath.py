"""The decode kernel's speed path: the 32-bit code unpack (DEQ=2, inline PTX, CUDA only) against the
per-byte unpack it replaces, over every byte value, and the register caps against the uncapped
kernel. Without CUDA the interpreter runs the per-byte forms (DEQ 0 and 1) against plain integer
arithmetic, so the contract the PTX must meet is pinned on the CPU too."""

from __future__ import annotations

import kvarn_scenario as ks
import pytest
import torch
import triton
import triton.language as tl
from kvarn_ops import config, triton_decode

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CFG = config.KVarNConfig()
ROWS, COLS = 32, 64  # 2048 bytes: every value 8 times, shuffled, in a 2-D tile like a record's


@triton.jit
def _unpack_kernel(x_ptr, out_ptr, DEQ: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs)
    lo, hi = triton_decode._nibbles(x, DEQ)
    c0, c1, c2, c3 = triton_decode._crumbs(x, DEQ)
    n = R * C
    tl.store(out_ptr + offs, lo)
    tl.store(out_ptr + n + offs, hi)
    tl.store(out_ptr + 2 * n + offs, c0)
    tl.store(out_ptr + 3 * n + offs, c1)
    tl.store(out_ptr + 4 * n + offs, c2)
    tl.store(out_ptr + 5 * n + offs, c3)


def _bytes() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.arange(256, dtype=torch.int32).repeat(ROWS * COLS // 256)
    return x[torch.randperm(x.numel(), generator=g)].to(torch.uint8).view(ROWS, COLS).to(DEVICE)


def _unpack(x: torch.Tensor, deq: int) -> torch.Tensor:
    out = torch.empty(6, ROWS, COLS, dtype=torch.float16, device=x.device)
    _unpack_kernel[(1,)](x, out, DEQ=deq, R=ROWS, C=COLS)
    return out


def _expected_codes(x: torch.Tensor) -> torch.Tensor:
    xi = x.to(torch.int16)
    return torch.stack([xi & 15, xi >> 4, xi & 3, (xi >> 2) & 3, (xi >> 4) & 3, (xi >> 6) & 3])


def test_unpack_forms_match_integer_arithmetic() -> None:
    x = _bytes()
    want = _expected_codes(x)
    plain = _unpack(x, 0)  # int -> fp16 conversion: the codes' values
    assert torch.equal(plain.to(torch.int16), want)
    sub = _unpack(x, 1)  # fp16 subnormals: the codes' bits, value c * 2^-24
    assert torch.equal(sub.view(torch.int16), want)
    assert torch.equal(sub.float() * 2.0**24, plain.float())


@pytest.mark.skipif(DEVICE != "cuda", reason="DEQ=2 is inline PTX: CUDA only")
def test_ptx_unpack_is_bit_identical_to_the_per_byte_one() -> None:
    x = _bytes()
    assert torch.equal(_unpack(x, 2).view(torch.int16), _unpack(x, 1).view(torch.int16))
    assert torch.equal(_unpack(x, 2).view(torch.int16), _expected_codes(x))


@pytest.mark.skipif(DEVICE != "cuda", reason="register caps are a CUDA compile option")
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("cap", [128, 168])
def test_register_caps_change_nothing_but_speed(d: int, cap: int) -> None:
    sc = ks.build("kvarn_k4v2_g128", d, 2, [4133, 300, 0], device=DEVICE, iters=8, store="triton")
    q = ks.queries(sc, 6 if d == 256 else 4)
    args = (
        q,
        sc.cache,
        sc.pool_k,
        sc.pool_v,
        sc.block_slot,
        sc.block_table,
        sc.seq_lens,
        sc.layout,
        sc.h16,
        d**-0.5,
        CFG,
    )
    saved = triton_decode.MAXNREG[d]
    try:
        triton_decode.MAXNREG[d] = None
        free = triton_decode.kvarn_decode(*args, comp_end=sc.comp_end, num_splits=4)
        triton_decode.MAXNREG[d] = cap
        capped = triton_decode.kvarn_decode(*args, comp_end=sc.comp_end, num_splits=4)
    finally:
        triton_decode.MAXNREG[d] = saved
    assert torch.allclose(capped.float(), free.float(), rtol=1e-3, atol=1e-4)
    assert ks.cosine(capped, ks.ref_decode(sc, q)).min().item() >= 0.999
