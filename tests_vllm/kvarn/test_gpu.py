"""GPU tests (skipped cleanly without CUDA): the spec's case grid, split-K against single stage,
padded rows, and no recompiles across decode steps. Run on the device by gpu/kvarn/run_device.sh,
which sets KVARN_OUT so each case's figures are recorded."""

from __future__ import annotations

import json
import os

import kvarn_scenario as ks
import pytest
import torch
from kvarn_ops import config, quant, triton_decode, triton_store

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

LENGTHS = [1, 127, 128, 129, 4133, 131072, 0]  # 0: a padded row
CFG = config.KVarNConfig()


def _record(kind: str, **fields) -> None:
    out = os.environ.get("KVARN_OUT")
    if out:
        with open(os.path.join(out, "gpu_cases.jsonl"), "a") as f:
            f.write(json.dumps({"kind": kind, **fields}) + "\n")


def _decode(sc: ks.Scenario, q: torch.Tensor, splits: int | None, ws=None) -> torch.Tensor:
    return triton_decode.kvarn_decode(
        *ks.attention_args(sc, q),
        CFG,
        comp_end=sc.comp_end,
        num_splits=splits,
        workspace=ws,
    )


@pytest.fixture(scope="module", params=[128, 256], ids=["D128", "D256"])
def grid_scenario(request) -> ks.Scenario:
    return ks.build(
        "kvarn_k4v2_g128", request.param, 2, LENGTHS, device="cuda", iters=8, store="triton"
    )


@pytest.mark.parametrize("qpk", [1, 4, 6, 8])
def test_case_grid(grid_scenario: ks.Scenario, qpk: int) -> None:
    sc = grid_scenario
    q = ks.queries(sc, qpk)
    ref = ks.ref_decode(sc, q)
    single = _decode(sc, q, 1)
    auto = _decode(sc, q, None)
    split16 = _decode(sc, q, 16)
    torch.cuda.synchronize()
    for name, out in (("single", single), ("auto", auto), ("split16", split16)):
        assert torch.isfinite(out).all(), name
        cos = ks.cosine(out, ref)  # [B, Hq]
        for i, n in enumerate(LENGTHS):
            _record(
                "grid",
                d=sc.layout.head_dim,
                qpk=qpk,
                variant=name,
                length=n,
                min_cos=cos[i].min().item(),
            )
        assert cos.min().item() >= 0.999, (name, cos.min(dim=1).values.tolist())
        assert not out[-1].any(), f"{name}: the padded row is not 0"
    for name, out in (("auto", auto), ("split16", split16)):
        rel = ((out.float() - single.float()).norm() / single.float().norm()).item()
        _record("split_vs_single", d=sc.layout.head_dim, qpk=qpk, variant=name, rel=rel)
        assert rel <= 1e-3, (name, rel)


def test_store_kernel_vs_reference_on_many_tiles() -> None:
    from kvarn_ops import layout, reference

    stats = {}
    for preset in sorted(layout.PRESETS):
        for d in (128, 256):
            lay = layout.record_layout(preset, d)
            g = torch.Generator().manual_seed(d)
            n, hkv = 64, 4
            chan = torch.exp(torch.randn(1, 1, hkv, d, generator=g))
            pk = (torch.randn(n, lay.group, hkv, d, generator=g) * chan).half().cuda()
            pv = (torch.randn(n, lay.group, hkv, d, generator=g) * chan).half().cuda()
            slots = torch.arange(n, dtype=torch.int32, device="cuda")
            blocks = torch.randperm(n, generator=g).to(torch.int32).cuda()
            c_ref = torch.zeros(n, hkv, lay.size, dtype=torch.uint8, device="cuda")
            c_tri = c_ref.clone()
            reference.flush_reference(c_ref, pk, pv, slots, blocks, lay, 8)
            triton_store.store_blocks(c_tri, pk, pv, slots, blocks, lay, 8)
            fr = quant.decode(c_ref.reshape(-1, lay.size), lay)
            ft = quant.decode(c_tri.reshape(-1, lay.size), lay)
            kr, vr = quant.dequantize_blocks(c_ref.reshape(-1, lay.size), lay)
            kt, vt = quant.dequantize_blocks(c_tri.reshape(-1, lay.size), lay)
            s = {
                "k_code_mismatch": (fr[0].codes != ft[0].codes).float().mean().item(),
                "v_code_mismatch": (fr[1].codes != ft[1].codes).float().mean().item(),
                "max_code_diff": max(
                    (fr[i].codes.int() - ft[i].codes.int()).abs().max().item() for i in (0, 1)
                ),
                "k_dequant_rel": ((kt - kr).norm() / kr.norm()).item(),
                "v_dequant_rel": ((vt - vr).norm() / vr.norm()).item(),
            }
            stats[f"{preset}/D{d}"] = s
            _record("store", preset=preset, d=d, **s)
    for key, s in stats.items():
        assert s["max_code_diff"] <= 1, key
        assert s["k_code_mismatch"] <= 1e-3 and s["v_code_mismatch"] <= 1e-3, (key, s)
        assert s["k_dequant_rel"] <= 1e-2 and s["v_dequant_rel"] <= 1e-2, (key, s)


def _n_compiled(kernel) -> int:
    return sum(len(c[0]) for c in kernel.device_caches.values())


def test_decode_steps_do_not_recompile() -> None:
    ws = triton_decode.DecodeWorkspace()
    sc = ks.build("kvarn_k4v2_g128", 128, 2, [300, 5, 1000], device="cuda", iters=1, store="triton")
    q = ks.queries(sc, 4)
    _decode(sc, q, 1, ws)
    _decode(sc, q, 4, ws)
    torch.cuda.synchronize()
    n_dec = _n_compiled(triton_decode._kvarn_decode_kernel)
    n_comb = _n_compiled(triton_decode._kvarn_combine_rot_kernel)
    n_head = _n_compiled(triton_decode._kvarn_combine_head_rot_kernel)
    n_store = _n_compiled(triton_store._kvarn_store_kernel)
    # other steps: other batches, lengths, table widths, split counts (1 and 16 included); the
    # first call compiled every launch the policy picks (both warp counts, both combines: 40
    # requests x 8 query heads take the 16-head one, a batch of one twice the warps)
    for lens, splits in (
        ([7, 129, 2000, 0], 3),
        ([1], 2),
        ([4133] * 5, 16),
        ([64, 65], 1),
        ([9000], 7),
        ([600] * 40, 2),
    ):
        s2 = ks.build("kvarn_k4v2_g128", 128, 2, lens, device="cuda", iters=1, store="triton")
        _decode(s2, ks.queries(s2, 4), splits, ws)
        _decode(s2, ks.queries(s2, 4), None, ws)
    torch.cuda.synchronize()
    assert _n_compiled(triton_decode._kvarn_decode_kernel) == n_dec
    assert _n_compiled(triton_decode._kvarn_combine_rot_kernel) == n_comb
    assert _n_compiled(triton_decode._kvarn_combine_head_rot_kernel) == n_head
    assert _n_compiled(triton_store._kvarn_store_kernel) == n_store
    _record("compiled", decode=n_dec, combine=n_comb, combine_head=n_head, store=n_store)


@pytest.fixture
def checked_launch(monkeypatch: pytest.MonkeyPatch):
    """The fast launch path with Triton's own key computed beside ours on every launch."""
    from kvarn_ops import launch

    monkeypatch.setattr(launch, "MODE", "check")
    return launch


@pytest.mark.parametrize("d", [128, 256])
def test_fast_launch_gives_what_triton_launch_gives(checked_launch, d: int) -> None:
    """Bit for bit, over batches, lengths, split counts and both combines (40 requests x 8 query
    heads take the 16-head one), with Triton's key checked against ours on every launch."""
    launch = checked_launch
    for lens, splits in (([300, 5, 1000], 1), ([7, 129, 2000, 0], 3), ([1], None),
                         ([4133] * 5, 16), ([600] * 40, 2), ([9000], None)):  # fmt: skip
        sc = ks.build("kvarn_k4v2_g128", d, 2, lens, device="cuda", iters=1, store="triton")
        q = ks.queries(sc, 4)
        launch.MODE = "off"
        want = _decode(sc, q, splits)
        launch.MODE = "check"
        first = _decode(sc, q, splits)  # fills the cache (through Triton)
        again = _decode(sc, q, splits)  # through the launcher directly
        torch.cuda.synchronize()
        assert torch.equal(first, want) and torch.equal(again, want), (lens, splits)
    assert launch._CACHE, "the fast path was never taken"


def test_fast_launch_replays_in_a_cuda_graph(checked_launch) -> None:
    """A decode step captured with the fast launch replays with new queries and longer sequences
    (same blocks) and gives what an eager standard launch gives."""
    launch = checked_launch
    sc = ks.build("kvarn_k4v2_g128", 128, 2, [4133, 700, 129], device="cuda", iters=1,
                  store="triton")  # fmt: skip
    q = ks.queries(sc, 4)
    static_q = q.clone()
    args = list(ks.attention_args(sc, static_q))
    ws = triton_decode.DecodeWorkspace()

    def step() -> torch.Tensor:
        return triton_decode.kvarn_decode(
            *args, CFG, comp_end=sc.comp_end, max_seq_len=8192, num_splits=4, num_warps=2,
            workspace=ws,
        )  # fmt: skip

    step()
    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for trial in range(3):
        new_q = ks.queries(sc, 4) * (1 + trial)
        static_q.copy_(new_q)
        graph.replay()
        launch.MODE = "off"
        want = step()
        launch.MODE = "check"
        torch.cuda.synchronize()
        assert torch.equal(out, want), trial


@pytest.mark.parametrize("d", [128, 256])
def test_fast_launch_of_the_store_and_the_write(checked_launch, d: int) -> None:
    """The flush (store_blocks), the pool write (rotate_write) and the two in one launch
    (LayerStore.flush_write, alone and bound once for a layer) go through the fast launch too: bit
    for bit what Triton's own launch gives, with Triton's key checked against ours, over lists with
    skipped entries, a slot flushed and written in one step, a token with slot -1, and a key tensor
    that is a strided view."""
    from kvarn_ops import layout

    launch = checked_launch
    lay = layout.record_layout("kvarn_k4v2_g128", d)
    g = torch.Generator().manual_seed(d)
    hkv, slots_n = 4, 9
    pk = torch.randn(slots_n, lay.group, hkv, d, generator=g).half().cuda()
    pv = torch.randn(slots_n, lay.group, hkv, d, generator=g).half().cuda()
    h16 = torch.randn(d, d, generator=g).half().cuda()
    for flush, toks in (([3, -1, 0, 5, -1, -1, -1, 1, -1], 3), ([-1] * 8 + [2], 7)):
        slots = torch.arange(slots_n, dtype=torch.int32, device="cuda")
        blocks = torch.tensor(flush, dtype=torch.int32, device="cuda")
        wide = torch.randn(toks, hkv, 2 * d, generator=g).half().cuda()
        key, value = wide[..., :d], wide[..., d:]  # strided views, head_dim contiguous
        w_slots = torch.tensor([2, -1, 4, 1, 0, 3, 5][:toks], dtype=torch.int64, device="cuda")
        w_rows = torch.arange(toks, dtype=torch.int64, device="cuda")
        outs = {}
        for mode in ("off", "check", "check"):  # Triton's launch; fills our cache; our fast path
            launch.MODE = mode
            cache = torch.zeros(8, hkv, lay.size, dtype=torch.uint8, device="cuda")
            k2, v2 = pk.clone(), pv.clone()
            triton_store.store_blocks(cache, k2, v2, slots, blocks, lay, 4)
            triton_store.rotate_write(k2, v2, h16, key, value, w_slots, w_rows)
            torch.cuda.synchronize()
            outs.setdefault(mode, []).append((cache, k2, v2))
        want = outs["off"][0]
        for got in outs["check"]:
            assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        # the step's one launch (flush_write), unbound and bound once for a layer as decode_step
        # does through its workspace (only the step's tensors specialized per launch), checked
        # against Triton's key: bit for bit Triton's own launch of it, and the two launches'
        # cache; the pools up to the write's last ulp (its sums run over another warp count)
        fused = []
        for mode, bind in (("off", False), ("check", False), ("check", False), ("check", True),
                           ("check", True)):  # fmt: skip
            launch.MODE = mode
            cache = torch.zeros(8, hkv, lay.size, dtype=torch.uint8, device="cuda")
            k2, v2 = pk.clone(), pv.clone()
            layer = triton_store.LayerStore(cache, k2, v2, lay, bind=bind)
            for _ in range(2 if bind else 1):  # bound: fills our cache, then the fast path
                cache.zero_()
                k2.copy_(pk)
                v2.copy_(pv)
                layer.flush_write(blocks, 4, h16, key, value, w_slots, w_rows)
            torch.cuda.synchronize()
            fused.append((cache, k2, v2))
        for got in fused[1:]:
            assert all(torch.equal(a, b) for a, b in zip(got, fused[0], strict=True))
        assert torch.equal(fused[0][0], want[0])
        for a, b in zip(fused[0][1:], want[1:], strict=True):  # within an fp16 ulp
            assert torch.allclose(a.float(), b.float(), rtol=2**-10, atol=1e-3)
    for kernel in ("_kvarn_store_kernel", "_rotate_write_kernel", "_flush_write_kernel"):
        assert any(k[0] == id(getattr(triton_store, kernel)) for k in launch._CACHE), kernel
    # a pointer passed for a tensor (restore) is only for a binding's fixed arguments
    args = (key, value, *key.stride()[:2], *value.stride()[:2], h16, w_slots, w_rows,
            pk.data_ptr(), pv, *pk.stride()[:3], slots_n - 1)  # fmt: skip
    kw = dict(D=d, CH=64, CB=triton_store.ROTATE_COLUMNS, num_warps=4)
    with pytest.raises(ValueError, match="restore needs a binding"):
        launch.launch(triton_store._rotate_write_kernel, (1, hkv, 1), args, kw, restore=((9, pk),))
