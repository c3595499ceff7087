"""The Triton kernels against the torch reference, on small shapes.

Without CUDA the conftest sets TRITON_INTERPRET=1, so these run the very same kernels through
Triton's interpreter on CPU tensors (that is how CI, which has no GPU, catches a kernel regression);
with CUDA they run compiled.
"""

from __future__ import annotations

import inspect
import os

import kvarn_scenario as ks
import pytest
import torch
import triton
import triton.language as tl
from kvarn_ops import (
    config,
    decode_rotation,
    decode_shares,
    hadamard,
    layout,
    quant,
    reference,
    triton_decode,
    triton_store,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    assert os.environ.get("TRITON_INTERPRET") == "1", "conftest must enable the interpreter"

CFG = config.KVarNConfig()


def _pool(lay: layout.RecordLayout, hkv: int, slots: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    d, gs = lay.head_dim, lay.group
    chan = torch.exp(torch.randn(1, 1, hkv, d, generator=g))
    tok = torch.exp(0.5 * torch.randn(1, gs, hkv, 1, generator=g))
    pk = (torch.randn(slots, gs, hkv, d, generator=g) * chan * tok).half().to(DEVICE)
    pv = (torch.randn(slots, gs, hkv, d, generator=g) * chan).half().to(DEVICE)
    return pk, pv


def _compare_store(lay: layout.RecordLayout, iters: int, seed: int = 0) -> None:
    hkv = 2
    pk, pv = _pool(lay, hkv, 3, seed)
    slots = torch.tensor([2, 0], dtype=torch.int32, device=DEVICE)
    blocks = torch.tensor([3, 1], dtype=torch.int32, device=DEVICE)
    c_ref = torch.zeros(5, hkv, lay.size, dtype=torch.uint8, device=DEVICE)
    c_tri = c_ref.clone()
    reference.flush_reference(c_ref, pk, pv, slots, blocks, lay, iters)
    triton_store.store_blocks(c_tri, pk, pv, slots, blocks, lay, iters)
    untouched = torch.tensor([0, 2, 4], device=DEVICE)
    assert not c_tri[untouched].any(), "the store wrote outside its blocks"
    assert torch.equal(c_tri[..., lay.payload :], c_ref[..., lay.payload :])
    fr = quant.decode(c_ref.reshape(-1, lay.size), lay)
    ft = quant.decode(c_tri.reshape(-1, lay.size), lay)
    for name, a, b in (("K", fr[0], ft[0]), ("V", fr[1], ft[1])):
        diff = (a.codes.int() - b.codes.int()).abs()
        # exp/log and reduction order differ in the last ulp; a code may flip at a rounding boundary
        assert diff.max().item() <= 1, name
        assert diff.float().mean().item() <= 1e-3, name
        for fa, fb in zip(a[1:], b[1:], strict=True):
            assert torch.allclose(fa.float(), fb.float(), rtol=2e-3, atol=1e-6), name
    kr, vr = quant.dequantize_blocks(c_ref.reshape(-1, lay.size), lay)
    kt, vt = quant.dequantize_blocks(c_tri.reshape(-1, lay.size), lay)
    assert ((kt - kr).norm() / kr.norm()).item() <= 1e-2
    assert ((vt - vr).norm() / vr.norm()).item() <= 1e-2


def test_store_and_write_refuse_what_they_cannot_address() -> None:
    """A cache or pools the kernels would read wrongly is refused by name before any launch, by
    the free functions and by a layer's bound LayerStore alike; a workspace binds a layer once
    and binds again for new pools."""
    lay = layout.record_layout("kvarn_k4v2_g128", 128)
    pk, pv = _pool(lay, 2, 3, 0)
    cache = torch.zeros(5, 2, lay.size, dtype=torch.uint8, device=DEVICE)
    slots = torch.tensor([0], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="cache must be contiguous uint8"):
        triton_store.store_blocks(cache.half(), pk, pv, slots, slots, lay, 2)
    with pytest.raises(ValueError, match="cache must be contiguous uint8"):
        triton_store.LayerStore(cache[:, :, : lay.size // 2], pk, pv, lay)
    with pytest.raises(ValueError, match="pools must be fp16"):
        triton_store.LayerStore(cache, pk[:, :64], pv[:, :64], lay)
    key = torch.zeros(1, 2, 256, dtype=torch.float16, device=DEVICE)[..., ::2]
    h16 = torch.eye(128, dtype=torch.float16, device=DEVICE)
    with pytest.raises(ValueError, match="head_dim must be contiguous"):
        triton_store.rotate_write(pk, pv, h16, key, key, slots.long(), slots.long())
    by_slot = torch.full((3,), -1, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="head_dim must be contiguous"):
        triton_store.LayerStore(cache, pk, pv, lay).flush_write(
            by_slot, 2, h16, key, key, slots.long(), slots.long()
        )
    with pytest.raises(ValueError, match=r"key and value must be \[T, 2, 128\]"):
        triton_store.LayerStore(cache, pk, pv, lay).flush_write(
            by_slot, 2, h16, key[:, :1], key[:, :1], slots.long(), slots.long()
        )
    with pytest.raises(ValueError, match="pools must be alike"):
        triton_store.rotate_write(pk, pv.transpose(1, 2), h16, key, key, slots, slots)
    ws = triton_decode.DecodeWorkspace()
    bound = ws.store(cache, pk, pv, lay)
    assert ws.store(cache, pk, pv, lay) is bound
    assert ws.store(cache, pk.clone(), pv, lay) is not bound


@pytest.mark.parametrize("preset", sorted(layout.PRESETS))
def test_store_kernel_matches_reference_d128(preset: str) -> None:
    _compare_store(layout.record_layout(preset, 128), iters=8)


def test_store_kernel_matches_reference_d256_and_zero_iterations() -> None:
    _compare_store(layout.record_layout("kvarn_k4v2_g128", 256), iters=8, seed=1)
    _compare_store(layout.record_layout("kvarn_k4v2_g64", 128), iters=0, seed=2)


def _decode(
    sc: ks.Scenario,
    q: torch.Tensor,
    splits: int | None,
    cfg: config.KVarNConfig = CFG,
    **kw,
):
    return triton_decode.kvarn_decode(
        *ks.attention_args(sc, q), cfg, comp_end=sc.comp_end, num_splits=splits, **kw
    )


@pytest.mark.parametrize(
    ("preset", "d", "qpk"),
    [
        ("kvarn_k4v2_g64", 128, 4),
        ("kvarn_k4v4_g64", 128, 1),
        ("kvarn_k4v2_g128", 128, 6),
        ("kvarn_k4v4_g128", 256, 8),
    ],
)
def test_decode_matches_reference_single_and_split(preset: str, d: int, qpk: int) -> None:
    g = layout.get_preset(preset).group
    # lengths around block edges; 0 is a padded row; several flushed blocks per request
    lens = [1, g - 1, g, g + 1, 4 * g + 5, 0]
    sc = ks.build(preset, d, 2, lens, device=DEVICE, iters=2, store="triton")
    assert sc.flushed_blocks >= 3
    q = ks.queries(sc, qpk)
    ref = ks.ref_decode(sc, q)
    single = _decode(sc, q, 1)
    split = _decode(sc, q, 3)
    for out in (single, split):
        assert torch.isfinite(out).all()
        assert ks.cosine(out, ref).min().item() >= 0.999
    assert not single[-1].any() and not split[-1].any(), "a padded row must be exactly 0"
    rel = ((split.float() - single.float()).norm() / single.float().norm()).item()
    assert rel <= 1e-3


def test_more_splits_than_blocks_and_the_reference_fallback() -> None:
    sc = ks.build("kvarn_k4v2_g64", 128, 1, [70, 3], device=DEVICE, iters=1)
    q = ks.queries(sc, 2)
    ref = ks.ref_decode(sc, q)
    out = _decode(sc, q, 8)  # 8 splits over 2 blocks: empty splits must not poison the combine
    assert torch.isfinite(out).all() and ks.cosine(out, ref).min().item() >= 0.999
    off = config.KVarNConfig(fused_decode=False)
    assert torch.allclose(_decode(sc, q, None, off).float(), ref.half().float())


def test_both_combines_agree_over_many_splits() -> None:
    """A launch of 20 splits over requests that fill 2 and 4 of them (``_shares``): the per-head
    combine (small batches) and the 16-head combine give the same merge."""
    sc = ks.build("kvarn_k4v2_g64", 128, 2, [70, 6 * 64 + 9, 0], device=DEVICE, iters=1)
    q = ks.queries(sc, 4)
    ref = ks.ref_decode(sc, q)
    wide = config.KVarNConfig(max_splits=32)
    per_head = _decode(sc, q, 20, wide, combine_heads=1)
    grouped = _decode(sc, q, 20, wide, combine_heads=16)
    assert torch.isfinite(per_head).all() and not per_head[-1].any()
    assert ks.cosine(per_head, ref).min().item() >= 0.999
    rel = ((per_head.float() - grouped.float()).norm() / grouped.float().norm()).item()
    assert rel <= 1e-3


def _live_splits(seq_len: int, comp_end: int, splits: int, g: int) -> int:
    """``_shares``' live split count, from its rule: the sink and each tail block POOL_COST
    units, each compressed block one, at least MIN_SPLIT_UNITS units a split."""
    nblk = -(-seq_len // g)
    c_end = min(comp_end, nblk)
    units = (4 if nblk else 0) + max(c_end - 1, 0) + 4 * max(nblk - max(c_end, 1), 0)
    return min(splits, max(1, -(-units // 2)))


@pytest.mark.parametrize("heads", [1, 16])
def test_a_launch_for_a_longer_context_runs_the_live_splits_only(heads: int) -> None:
    """A step launched for the longest context (``step.fixed_launch``) runs a short request on as
    many splits as its length fills; the splits past those write nothing, and the combines read
    nothing of them: partials poisoned with NaN beforehand stay NaN and out of the result."""
    sc = ks.build("kvarn_k4v2_g64", 128, 2, [70, 6 * 64 + 9, 20 * 64 + 3, 0], device=DEVICE,
                  iters=1, store="triton")  # fmt: skip
    q = ks.queries(sc, 4)
    splits, hq = 20, q.shape[1]
    ws = triton_decode.DecodeWorkspace()
    part, lse = ws.get(len(sc.seq_lens) * splits, hq, 128, DEVICE)
    part.fill_(float("nan"))
    lse.fill_(float("nan"))
    out = _decode(sc, q, splits, config.KVarNConfig(max_splits=32), combine_heads=heads,
                  workspace=ws)  # fmt: skip
    assert torch.isfinite(out).all() and not out[-1].any()
    assert ks.cosine(out, ks.ref_decode(sc, q)).min().item() >= 0.999
    lens = zip(sc.seq_lens.tolist(), sc.comp_end.tolist(), strict=True)
    live = [_live_splits(n, c, splits, 64) for n, c in lens]
    assert live == [4, 7, 14, 1]  # 8, 13, 27 and 0 units (the last a padded row)
    written = ~lse.view(-1, splits, hq)[: len(live)].isnan().all(dim=2)
    assert written.tolist() == [[s < n for s in range(splits)] for n in live]


@triton.jit
def _share_kernel(seq_lens, comp_ends, out, num_splits, G: tl.constexpr):
    """Per (request, split): live, start, end, k_lo, k_hi, per_split, n_comp, n_tail as the decode
    kernel computes them (``_shares``, ``_share_of``)."""
    c = tl.program_id(0)
    split = tl.program_id(1)
    nblk, _, n_comp, n_tail, sink_units, per, live = decode_shares._shares(
        tl.load(seq_lens + c), tl.load(comp_ends + c), num_splits, G
    )
    start, end, k_lo, k_hi = decode_shares._share_of(
        split, nblk, n_comp, n_tail, sink_units, per, live
    )
    o = out + (c * num_splits + split) * 8
    tl.store(o, live)
    tl.store(o + 1, start)
    tl.store(o + 2, end)
    tl.store(o + 3, k_lo)
    tl.store(o + 4, k_hi)
    tl.store(o + 5, per)
    tl.store(o + 6, n_comp)
    tl.store(o + 7, n_tail)


def _share_table(seq_lens: list[int], comp_ends: list[int], splits: int, g: int) -> list:
    """[request][split] -> (live, start, end, k_lo, k_hi, per_split, n_comp, n_tail)."""
    n = len(seq_lens)
    out = torch.zeros(n, splits, 8, dtype=torch.int32, device=DEVICE)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    ends = torch.tensor(comp_ends, dtype=torch.int32, device=DEVICE)
    _share_kernel[(n, splits)](lens, ends, out, splits, G=g)
    return out.cpu().tolist()


def test_every_compressed_block_and_pool_half_is_read_once() -> None:
    """The decode kernel's own share arithmetic (run through a kernel that writes it out) over
    requests of 0-16 blocks, comp_end anywhere, 1-20 splits: the live splits' compressed ranges
    tile [1, comp_end) in order, their pool items tile the sink's and the tail blocks' halves, no
    split holds more than its share plus one item's overhang, and at 2 units a split the two
    halves of every pool block are read by different splits."""
    half = decode_shares.POOL_COST.value // 2
    g, lens, ends = 64, [], []
    for nblk in range(17):
        for ce in sorted({1, nblk // 2, nblk, nblk + 3}):
            if ce >= 1:
                lens.append(max(0, nblk * g - 7 * (nblk % 3)))
                ends.append(ce)
    two_units = 0
    for splits in (1, 2, 3, 8, 20):
        table = _share_table(lens, ends, splits, g)
        for c, rows in enumerate(table):
            live, per, n_comp, n_tail = rows[0][0], rows[0][5], rows[0][6], rows[0][7]
            n_items = 2 + 2 * n_tail if lens[c] else 0
            blocks, items, owner = [], [], {}
            for s in range(live):
                _, start, end, k_lo, k_hi, *_ = rows[s]
                blocks += range(start, end)
                items += range(k_lo, k_hi)
                owner.update(dict.fromkeys(range(k_lo, k_hi), s))
                units = (end - start) + half * (k_hi - k_lo)
                assert units <= per + half - 1, (lens[c], ends[c], splits, s)
            assert blocks == list(range(1, 1 + n_comp)), (lens[c], ends[c], splits)
            assert items == list(range(n_items)), (lens[c], ends[c], splits)
            if per == half and live >= 2:
                two_units += 1
                assert all(owner[k] != owner[k + 1] for k in range(0, n_items, 2))
    assert two_units >= 30  # the halves' rule was exercised


def test_pool_blocks_are_read_in_halves_by_neighbouring_splits() -> None:
    """At 2 units a split the sink's halves go to splits 0 and 1 and a tail block's to two
    neighbours (``_share_of``): every half read once, the result the reference's, every live split
    written. A request of 3 compressed blocks and 2 pool blocks in its tail (slot map) has
    4 + 3 + 8 = 15 units: 8 live splits of 2 units."""
    sc = ks.build("kvarn_k4v2_g64", 128, 2, [5 * 64 + 9, 70], device=DEVICE, iters=1,
                  store="triton")  # fmt: skip
    # request 0's block 4 back in the pool (a free slot): its tail is blocks 4 and 5, both pool
    free, phys = int(sc.pool_k.shape[0]) - 1, int(sc.block_table[0, 4])
    sc.pool_k[free] = sc.k_rot[0][256:320]
    sc.pool_v[free] = sc.v_rot[0][256:320]
    sc.block_slot[phys] = free
    sc.cache[phys] = 0  # a stale record must not be read
    ce = triton_decode.compressed_end_from_slots(sc.block_slot, sc.block_table, sc.seq_lens, 64)
    assert ce.tolist() == [4, 1]
    live = 8
    table = _share_table(sc.seq_lens.tolist(), ce.tolist(), 20, 64)[0]
    assert table[0][0] == live and table[0][5:] == [2, 3, 2]  # per split, compressed, tail
    owners = {k: s for s in range(live) for k in range(table[s][3], table[s][4])}
    assert sorted(owners) == list(range(6)) and owners[0] != owners[1]
    assert owners[2] != owners[3] and owners[4] != owners[5]
    q = ks.queries(sc, 4)
    splits, hq = 20, q.shape[1]
    ws = triton_decode.DecodeWorkspace()
    _, lse = ws.get(len(sc.seq_lens) * splits, hq, 128, DEVICE)
    lse.fill_(float("nan"))
    out = triton_decode.kvarn_decode(*ks.attention_args(sc, q), config.KVarNConfig(max_splits=32),
                                     comp_end=ce, num_splits=splits, workspace=ws)  # fmt: skip
    assert ks.cosine(out, ks.ref_decode(sc, q)).min().item() >= 0.999
    written = ~lse.view(-1, splits, hq)[0].isnan().all(dim=1)
    assert written.tolist() == [s < live for s in range(splits)]


@triton.jit
def _both_rotations(q, s_qh, h, out, q_scale, QPK: tl.constexpr, QH: tl.constexpr, D: tl.constexpr):
    kvh = tl.program_id(0)
    r = tl.arange(0, QH)
    dd = tl.arange(0, D)
    o = out + kvh * 2 * D * QH + dd[:, None] * QH + r[None, :]
    tl.store(o, decode_rotation._rotate_q(q, s_qh, h, q_scale, kvh * QPK + r, r < QPK, D))
    tl.store(o + D * QH, decode_rotation._rotate_q_kron(q, s_qh, q_scale, kvh * QPK, QPK, QH, D))


def test_q_rotated_without_h_equals_the_product_with_h() -> None:
    """The D = 256 prologue (``_rotate_q_kron``: Sylvester's H as H16 ⊗ H16, no H read) gives the
    product with the fp16 H ``_rotate_q`` reads, to fp32 rounding, and zeros in the padding heads."""
    d, qpk, qh, hkv = 256, 6, 8, 3
    g = torch.Generator().manual_seed(7)
    q = (torch.randn(hkv * qpk, d, generator=g) * 3).half().to(DEVICE)
    h16 = hadamard.hadamard(d, torch.float16, DEVICE)
    out = torch.zeros(hkv, 2, d, qh, device=DEVICE)
    _both_rotations[(hkv,)](q, q.stride(0), h16, out, 0.5, QPK=qpk, QH=qh, D=d)
    want = ((q.double() @ h16.double()) * 0.5).view(hkv, qpk, d).transpose(1, 2)
    for side in (0, 1):
        assert (out[:, side, :, :qpk].double() - want).abs().max().item() <= 1e-6 * want.abs().max()
    assert not out[:, 1, :, qpk:].any()


@pytest.mark.parametrize(("splits", "heads"), [(3, 1), (3, 16), (1, None)])
def test_decode_writes_into_a_strided_out(splits: int, heads: int | None) -> None:
    """``out=``: the result lands in the caller's buffer (here every other row of a wider one, in
    bf16 where q is fp16) from either combine and from a single stage, and nothing else of it is
    touched; a wrong shape is refused."""
    sc = ks.build("kvarn_k4v2_g64", 128, 2, [70, 200], device=DEVICE, iters=1)
    q = ks.queries(sc, 4)
    want = _decode(sc, q, splits, combine_heads=heads).float()
    big = torch.full((4, q.shape[1], 128), 7.0, dtype=torch.bfloat16, device=DEVICE)
    got = _decode(sc, q, splits, combine_heads=heads, out=big[::2])
    assert got.data_ptr() == big.data_ptr()
    assert torch.allclose(big[::2].float(), want, rtol=1e-2, atol=1e-3)
    assert (big[1::2] == 7.0).all(), "rows between out's rows were written"
    with pytest.raises(ValueError, match="out"):
        _decode(sc, q, 3, out=big[:1])


@pytest.mark.parametrize(
    ("preset", "d", "qpk"), [("kvarn_k4v2_g64", 128, 4), ("kvarn_k4v4_g128", 256, 6)]
)
def test_rotation_in_the_kernel_matches_the_gemm(preset: str, d: int, qpk: int) -> None:
    """rotate_in_kernel: q·H·scale in the decode prologue (fp16 operands, fp32 sums) instead of the
    fp32 GEMM before it; single stage and split, fp16 and bf16 q."""
    g = layout.get_preset(preset).group
    sc = ks.build(preset, d, 2, [g + 1, 3 * g + 7, 0], device=DEVICE, iters=1)
    q = ks.queries(sc, qpk)
    ref = ks.ref_decode(sc, q)
    for dtype in (torch.float16, torch.bfloat16):
        qq = q.to(dtype)
        for splits in (1, 3):
            # the GEMM side at a fixed launch (it compiles only itself on CUDA); the kernel side
            # as deployed, at the launch the policy picks
            w = triton_decode.WARPS[d]
            gemm = _decode(sc, qq, splits, rotate_in_kernel=False, num_warps=w)
            inside = _decode(sc, qq, splits)
            assert inside.dtype == dtype and not inside[-1].any()
            assert ks.cosine(inside, ref).min().item() >= 0.999
            rel = ((inside.float() - gemm.float()).norm() / gemm.float().norm()).item()
            assert rel <= 2e-3, (dtype, splits, rel)
    with pytest.raises(ValueError, match="word path"):
        _decode(sc, q, 1, rotate_in_kernel=True, deq=0)


def test_launch_policy() -> None:
    """One wave of resident programs (132 SMs x 8 resident warps), at least 4 blocks a split, at
    least 2 splits where there are 8 blocks; twice the warps when the most programs a step can
    have fill FILL of the slots or less. The figures behind it: runs 14-17 in gpu/kvarn/results/runs-1-45.jsonl."""
    cfg = config.KVarNConfig()  # at most 128 splits
    splits, warps = triton_decode.choose_splits, triton_decode.choose_warps
    assert splits(8, 8, 256, 132, cfg, warps=1) == 16  # 1056 one-warp slots / 64 programs
    assert splits(32, 8, 256, 132, cfg, warps=1) == 4
    assert splits(32, 4, 256, 132, cfg, warps=2) == 4  # 528 two-warp slots / 128
    assert splits(128, 8, 1024, 132, cfg, warps=1) == 2  # fills the GPU alone: still 2
    assert splits(1, 8, 256, 132, cfg, warps=2) == 64  # at least 4 blocks a split
    assert splits(1, 8, 48, 132, cfg, warps=2) == 12
    assert splits(1, 4, 1024, 132, cfg, warps=2) == 128  # capped by KVARN_MAX_SPLITS
    assert splits(1, 8, 3, 132, cfg) == 1  # nothing to split
    assert splits(1, 8, 1024, 132, config.KVarNConfig(split_k=False)) == 1
    assert splits(1, 8, 1024, 132, config.KVarNConfig(num_splits=5)) == 5
    # D=128 (1 warp, doubles up to a full one-warp wave), D=256 (2 warps, up to half of one)
    assert warps(1, 8, 256, 132, cfg, 128) == 2  # 8 heads x 64 splits = 512 <= 1056
    assert warps(1, 8, 1024, 132, cfg, 128) == 2  # 8 x 128 = 1024 <= 1056
    assert warps(2, 8, 1024, 132, cfg, 128) == 1
    assert warps(8, 8, 256, 132, cfg, 128) == 1
    assert warps(1, 4, 256, 132, cfg, 256) == 4  # 4 x 64 = 256 <= 528 / 2
    assert warps(1, 4, 1024, 132, cfg, 256) == 2  # 4 x 128 = 512 > 264
    assert warps(1, 8, 256, 132, config.KVarNConfig(num_splits=4), 128) == 1  # forced: as asked


def test_split_rows_bounds_every_step() -> None:
    """The workspace reserved up front covers every batch the policy may see, at any length, and
    is far below the old max_num_seqs x max_splits rows."""
    cfg = config.KVarNConfig()
    dev = torch.device("cpu")
    rows = triton_decode.split_rows(256, 8, 128, cfg, dev)
    sms = triton_decode._num_sms(dev)
    for b in range(1, 257):
        for blocks in (2, 9, 64, 1024, 1 << 20):
            w = triton_decode.choose_warps(b, 8, blocks, sms, cfg, 128)
            s = triton_decode.choose_splits(b, 8, blocks, sms, cfg, w)
            assert s == 1 or b * s <= rows, (b, blocks, s)
    assert rows < 256 * cfg.max_splits // 16
    assert triton_decode.split_rows(4, 8, 128, config.KVarNConfig(num_splits=16), dev) == 64
    assert triton_decode.split_rows(4, 8, 128, config.KVarNConfig(split_k=False), dev) == 0
    ws = triton_decode.DecodeWorkspace()
    part, lse = ws.get(rows, 32, 128, dev)
    assert part.shape == (rows, 32, 128) and lse.shape == (rows, 32)
    assert ws.get(3, 32, 128, dev)[0] is part  # a smaller step reuses the buffer


@pytest.mark.parametrize(("deq", "prefetch"), [(0, False), (1, True), (0, True)])
def test_decode_kernel_variants(deq: int, prefetch: bool) -> None:
    """The default variant (subnormal codes, no prefetch) is covered above; the others agree too.
    (comp_end is left out here: derived from the slot map on the device.)"""
    sc = ks.build("kvarn_k4v2_g64", 128, 1, [200, 64], device=DEVICE, iters=1, store="triton")
    q = ks.queries(sc, 4)
    ref = ks.ref_decode(sc, q)
    out = triton_decode.kvarn_decode(
        *ks.attention_args(sc, q),
        CFG,
        num_splits=2,
        deq=deq,
        prefetch=prefetch,
    )
    assert ks.cosine(out, ref).min().item() >= 0.999


def test_comp_end_from_the_book_matches_the_slot_map() -> None:
    sc = ks.build("kvarn_k4v2_g64", 128, 1, [1, 64, 65, 129, 300, 0], device=DEVICE, iters=0)
    from_slots = triton_decode.compressed_end_from_slots(
        sc.block_slot, sc.block_table, sc.seq_lens, 64
    )
    # [1, 64, 65, 129, 300] tokens, committed = n - 1: blocks [1, (n-1)//64) are compressed
    assert sc.comp_end.tolist() == [1, 1, 1, 2, 4, 1]
    assert from_slots[:-1].tolist() == sc.comp_end[:-1].tolist()


def test_any_slot_map_state_decodes_right() -> None:
    """The hot loop trusts comp_end; everything else follows the slot map. A block put back in the
    pool mid-sequence, and comp_end = 1 (every block through the cold loop), both still match."""
    sc = ks.build("kvarn_k4v2_g64", 128, 2, [400, 330], device=DEVICE, iters=1, store="triton")
    assert sc.comp_end.tolist() == [6, 5]
    # Block 3 of request 0 back in the pool (a free slot), its fp16 K/V restored.
    free = int(sc.pool_k.shape[0]) - 1
    phys = int(sc.block_table[0, 3])
    sc.pool_k[free] = sc.k_rot[0][192:256]
    sc.pool_v[free] = sc.v_rot[0][192:256]
    sc.block_slot[phys] = free
    sc.cache[phys] = 0  # a stale record must not be read
    q = ks.queries(sc, 2)
    ref = ks.ref_decode(sc, q)
    derived = triton_decode.compressed_end_from_slots(
        sc.block_slot, sc.block_table, sc.seq_lens, 64
    )
    assert derived.tolist() == [3, 5]
    for ce in (None, torch.ones_like(sc.comp_end)):
        out = triton_decode.kvarn_decode(
            *ks.attention_args(sc, q),
            CFG,
            comp_end=ce,
            num_splits=2,
        )
        assert ks.cosine(out, ref).min().item() >= 0.999


# Everything that may change from one step to the next. None of it may be a constexpr (a new value
# would compile a new kernel) and the integer ones must not be value-specialized either.
PER_STEP = {
    "_kvarn_decode_kernel": {
        "num_splits",
        "s_bt",
        "q_ptr",
        "seq_lens",
        "block_table",
        "block_slot",
    },
    "_kvarn_combine_kernel": {"num_splits"},
    "_kvarn_combine_rot_kernel": {"num_splits", "seq_lens", "comp_end"},
    "_kvarn_combine_head_rot_kernel": {"num_splits", "seq_lens", "comp_end"},
    "_kvarn_store_kernel": {"n_iters", "slots", "blocks", "n_entries"},
}
NOT_SPECIALIZED = {
    "_kvarn_decode_kernel": {"num_splits", "s_bt"},
    "_kvarn_combine_kernel": {"num_splits"},
    "_kvarn_combine_rot_kernel": {"num_splits"},
    "_kvarn_combine_head_rot_kernel": {"num_splits"},
    "_kvarn_store_kernel": {"n_iters", "n_entries"},
}
# The only constexprs: sizes fixed for a model (G, D, bits, heads per KV head, record offsets),
# the kernel variant (DEQ, PREFETCH, ROT_Q: fixed per deployment), plus IS_SPLIT (single stage or
# split-K) and the rotating combines' fixed tiling (heads per program HB; splits read at once SC
# and output channels per program JB).
ALLOWED_CONSTEXPR = {
    "QPK",
    "QH",
    "D",
    "G",
    "KB",
    "VB",
    "SPAD",
    "EPP",  # flush-list entries a program reads at once: fixed
    "IS_SPLIT",
    "HB",
    "SC",
    "JB",
    "DEQ",
    "L2PF",  # blocks prefetched ahead: fixed per deployment
    "REC",  # record bytes: fixed per model
    "PREFETCH",
    "ROT_Q",
    "K_CODES",
    "K_SCOL",
    "K_ZP",
    "K_SROW",
    "V_CODES",
    "V_SCOL",
    "V_SROW",
    "V_ZP",
}


def _signature(kernel) -> tuple[str, set[str], set[str]]:
    """(name, constexpr parameters, do_not_specialize names) of a compiled or interpreted kernel."""
    fn = kernel.fn  # JITFunction.fn and InterpretedFunction.fn are the Python function
    dns = getattr(kernel, "do_not_specialize", None)
    if dns is None:  # the interpreter keeps the decorator's arguments in .kwargs
        dns = kernel.kwargs.get("do_not_specialize") or []
    names = list(inspect.signature(fn).parameters)
    consts = {
        n for n, p in inspect.signature(fn).parameters.items() if "constexpr" in str(p.annotation)
    }
    return fn.__name__, consts, {names[i] if isinstance(i, int) else i for i in dns}


@pytest.mark.parametrize(
    "kernel",
    [
        triton_decode._kvarn_decode_kernel,
        triton_decode._kvarn_combine_kernel,
        triton_decode._kvarn_combine_rot_kernel,
        triton_decode._kvarn_combine_head_rot_kernel,
        triton_store._kvarn_store_kernel,
    ],
    ids=["decode", "combine", "combine_rot", "combine_head_rot", "store"],
)
def test_nothing_per_step_is_a_constexpr(kernel) -> None:
    name, consts, dns = _signature(kernel)
    assert consts <= ALLOWED_CONSTEXPR, consts - ALLOWED_CONSTEXPR
    assert not consts & PER_STEP[name]
    assert NOT_SPECIALIZED[name] <= dns
