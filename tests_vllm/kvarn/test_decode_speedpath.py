"""The decode kernel's speed path: the 32-bit code unpack (DEQ=2, inline PTX, CUDA only) against the
per-byte unpack it replaces, over every byte value; the word path's plane unpack (DEQ=4, inline PTX)
against its portable form (DEQ=3) over every 16-bit word; the word path against the byte path and
the register caps / warp counts against the defaults. Without CUDA the interpreter runs the portable
forms (DEQ 0, 1, 3) against plain integer arithmetic, so the contract the PTX must meet is pinned on
the CPU too."""

from __future__ import annotations

import kvarn_scenario as ks
import pytest
import torch
import triton
import triton.language as tl
from kvarn_ops import config, decode_plan, triton_decode

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


@triton.jit
def _unpack16_kernel(x_ptr, out_ptr, DEQ: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs)
    n0, n1, n2, n3 = triton_decode._nib16(x, DEQ)
    c0, c1, c2, c3, c4, c5, c6, c7 = triton_decode._crumb16(x, DEQ)
    n = R * C
    tl.store(out_ptr + offs, n0)
    tl.store(out_ptr + n + offs, n1)
    tl.store(out_ptr + 2 * n + offs, n2)
    tl.store(out_ptr + 3 * n + offs, n3)
    tl.store(out_ptr + 4 * n + offs, c0)
    tl.store(out_ptr + 5 * n + offs, c1)
    tl.store(out_ptr + 6 * n + offs, c2)
    tl.store(out_ptr + 7 * n + offs, c3)
    tl.store(out_ptr + 8 * n + offs, c4)
    tl.store(out_ptr + 9 * n + offs, c5)
    tl.store(out_ptr + 10 * n + offs, c6)
    tl.store(out_ptr + 11 * n + offs, c7)


# (shift of the code in the word, shift of the plane's bits as stored: the place value is 2^this)
NIB_PLANES = [(0, 0), (4, 4), (8, 0), (12, 4)]
CRUMB_PLANES = [(0, 0), (2, 2), (4, 4), (6, 6), (8, 8), (10, 2), (12, 4), (14, 6)]


def _unpack16(x: torch.Tensor, deq: int) -> torch.Tensor:
    out = torch.empty(12, *x.shape, dtype=torch.float16, device=x.device)
    _unpack16_kernel[(1,)](x, out, DEQ=deq, R=x.shape[0], C=x.shape[1])
    return out


def test_word_planes_are_codes_masked_in_place() -> None:
    """Every int16 word: plane i holds code i's bits where the fp16 mantissa can take them, so its
    value is code·2^(place-24) exactly (the kernel scales each plane's dot back by 2^(24-place))."""
    g = torch.Generator().manual_seed(1)
    x = torch.arange(-32768, 32768, dtype=torch.int32)[torch.randperm(65536, generator=g)]
    x = x.to(torch.int16).view(256, 256)
    planes = _unpack16(x.to(DEVICE), 3).cpu()
    xi = x.to(torch.int32) & 0xFFFF
    for i, (shift, place) in enumerate(NIB_PLANES + CRUMB_PLANES):
        mask = 15 if i < 4 else 3
        code = (xi >> shift) & mask
        assert torch.equal(planes[i].view(torch.int16).to(torch.int32), code << place), i
        assert torch.equal(planes[i].double() * 2.0 ** (24 - place), code.double()), i


@pytest.mark.skipif(DEVICE != "cuda", reason="DEQ=4 is inline PTX: CUDA only")
def test_ptx_word_planes_are_bit_identical_to_the_portable_ones() -> None:
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(256, 256).to(DEVICE)
    assert torch.equal(_unpack16(x, 4).view(torch.int16), _unpack16(x, 3).view(torch.int16))


@pytest.mark.parametrize(
    ("preset", "d"), [("kvarn_k4v2_g128", 128), ("kvarn_k4v4_g64", 256), ("kvarn_k4v2_g64", 256)]
)
def test_word_path_matches_byte_path(preset: str, d: int) -> None:
    """Same record, two code paths (different planes, tile orientation, zero-point sums): the same
    attention, single stage and split."""
    sc = ks.build(preset, d, 2, [700, 131, 0], device=DEVICE, iters=2, store="triton")
    q = ks.queries(sc, 6 if d == 256 else 4)
    args = (*ks.attention_args(sc, q), CFG)
    for splits in (1, 3):
        words = triton_decode.kvarn_decode(*args, comp_end=sc.comp_end, num_splits=splits, deq=3)
        byts = triton_decode.kvarn_decode(*args, comp_end=sc.comp_end, num_splits=splits, deq=1)
        assert ks.cosine(words, byts).min().item() >= 0.9999
        assert words[-1].abs().max().item() == 0.0  # the padded row


@pytest.mark.skipif(DEVICE != "cuda", reason="warp counts are a CUDA launch option")
@pytest.mark.parametrize("d", [128, 256])
def test_warp_counts_change_nothing_but_speed(d: int) -> None:
    sc = ks.build("kvarn_k4v2_g128", d, 2, [4133, 300], device=DEVICE, iters=8, store="triton")
    q = ks.queries(sc, 6 if d == 256 else 4)
    args = (*ks.attention_args(sc, q), CFG)
    outs = [
        triton_decode.kvarn_decode(*args, comp_end=sc.comp_end, num_splits=4, num_warps=w)
        for w in (1, 2, 4)
    ]
    for o in outs[1:]:
        assert torch.allclose(o.float(), outs[0].float(), rtol=1e-3, atol=1e-4)
    assert ks.cosine(outs[0], ks.ref_decode(sc, q)).min().item() >= 0.999


@pytest.mark.skipif(DEVICE != "cuda", reason="register caps are a CUDA compile option")
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("cap", [128, 168])
def test_register_caps_change_nothing_but_speed(d: int, cap: int) -> None:
    sc = ks.build("kvarn_k4v2_g128", d, 2, [4133, 300, 0], device=DEVICE, iters=8, store="triton")
    q = ks.queries(sc, 6 if d == 256 else 4)
    args = (*ks.attention_args(sc, q), CFG)
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


@pytest.mark.skipif(DEVICE != "cuda", reason="the bulk L2 prefetch is sm_90 PTX: CUDA only")
@pytest.mark.parametrize("d", [128, 256])
def test_l2_prefetch_changes_nothing_but_speed(d: int) -> None:
    """Prefetching moves bytes into L2 and nothing else: the same output bit for bit, whether the
    distance reaches past a split's end (1 or 8 blocks ahead; 4133 tokens is 33 blocks, 4 splits)
    or not, with the pool blocks and the padded row."""
    sc = ks.build("kvarn_k4v2_g128", d, 2, [4133, 300, 0], device=DEVICE, iters=8, store="triton")
    q = ks.queries(sc, 6 if d == 256 else 4)
    args = (*ks.attention_args(sc, q), CFG)
    w = triton_decode.WARPS[d]
    for splits in (1, 4):
        plain = triton_decode.kvarn_decode(
            *args, comp_end=sc.comp_end, num_splits=splits, num_warps=w, l2_prefetch=0
        )
        for ahead in (1, 8):
            pf = triton_decode.kvarn_decode(
                *args, comp_end=sc.comp_end, num_splits=splits, num_warps=w, l2_prefetch=ahead
            )
            assert torch.equal(pf, plain), (splits, ahead)
    assert ks.cosine(plain, ks.ref_decode(sc, q)).min().item() >= 0.999


def test_l2_prefetch_only_where_the_instruction_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulk prefetch is sm_90 PTX: the interpreter and older GPUs run without it instead of
    failing to compile. No sm_80/sm_86 card is here, so the capability query is stubbed for those
    two cases (the H200 case runs for real in test_l2_prefetch_changes_nothing_but_speed)."""
    blocks = triton_decode.l2_prefetch_blocks
    assert blocks(torch.device("cpu"), 128, None) == 0
    assert blocks(torch.device("cpu"), 128, 4) == 0
    monkeypatch.setattr(torch.version, "hip", None)
    for cap, want in (((8, 0), 0), ((8, 6), 0), ((9, 0), triton_decode.L2_PREFETCH[128])):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d, c=cap: c)
        monkeypatch.setattr(decode_plan, "_CAPABILITY", {})  # asked once a device, normally
        assert blocks(torch.device("cuda"), 128, None) == want, cap
        assert blocks(torch.device("cuda"), 128, 2) == (2 if cap[0] >= 9 else 0)


def test_the_bound_launch_names_every_argument_that_changes_per_step() -> None:
    """_DECODE_VARY (what the fast launch specializes per call) covers q, the table and the
    lengths; the rest is exactly _Launch.fixed plus the rotation and the scale (the layer's) and
    the partials with the split count (the launch shape's binding): a wrong index would let a step
    reuse a kernel specialized for another alignment. (The GPU tests' check mode compares Triton's
    own key on every launch.)"""
    vary = set(triton_decode._DECODE_VARY)
    fixed = set(range(3, 12)) | {17, 18}
    shape = set(range(19, 26))
    assert vary.isdisjoint(fixed | shape) and fixed.isdisjoint(shape)
    assert vary | fixed | shape == set(range(26))  # 19 arguments and 7 output ones


def test_a_layer_binds_one_launch_whatever_view_of_its_cache_comes() -> None:
    """The backend folds a layer's cache into a new view every step: the workspace still keeps one
    bound launch for it (keyed by memory and geometry, not object), and another layer gets its own."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter runs CPU tensors only
    sc = ks.build("kvarn_k4v2_g128", 128, 2, [300, 5], device=dev, iters=1)
    q = ks.queries(sc, 4)
    ws = triton_decode.DecodeWorkspace()
    cfg = config.KVarNConfig()  # the backend's own, the same object every step
    args = list(ks.attention_args(sc, q))
    outs = []
    for _ in range(3):
        args[1] = sc.cache.view(sc.cache.shape)  # a new tensor object over the same memory
        outs.append(triton_decode.kvarn_decode(*args, cfg, comp_end=sc.comp_end, num_splits=2,
                                               workspace=ws))  # fmt: skip
    assert len(ws.launches) == 1
    assert all(torch.equal(o, outs[0]) for o in outs)
    # a plan per length the caller passes, but a binding per launch shape: lengths that pick the
    # same launch add plans (bounded) and no binding (the fast launch's cache keeps one per binding)
    (bound,) = ws.launches.values()
    for n in (400, 401, 402):
        triton_decode.kvarn_decode(*args, cfg, comp_end=sc.comp_end, max_seq_len=n, workspace=ws)
        if n == 400:
            shapes = len(bound.bindings)
    assert len(bound.plans) >= 3 and len(bound.bindings) == shapes
    other = ks.build("kvarn_k4v2_g128", 128, 2, [300, 5], device=dev, iters=1)
    triton_decode.kvarn_decode(*ks.attention_args(other, q), cfg, comp_end=other.comp_end,
                               num_splits=2, workspace=ws)  # fmt: skip
    assert len(ws.launches) == 2
