"""One layer's decode step with no host read (ops/kvarn/step.py), over a stream of steps.

A small engine in miniature: the backend's slot table (backends/kvarn_pool.py, loaded by path) plans
each step, its lists are copied into buffers that keep their memory (as the backend's builder
does), and the step flushes, writes and decodes. On the CPU the kernels run in Triton's interpreter
(a few steps, small shapes); on CUDA the step is captured once in a CUDA graph and replayed over 200
steps beside an eager twin, which must give the same bits, and both against the torch reference.
"""

from __future__ import annotations

import importlib.util
import sys

import conftest
import kvarn_scenario as ks
import pytest
import torch
from kvarn_ops import config, hadamard, layout, quant, reference, step, triton_store

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
CFG = config.KVarNConfig(sinkhorn_iters=2)


def _pool_module():
    name = "kvarn_pool_by_path"
    if name not in sys.modules:
        path = conftest.PKG_DIR.parents[1] / "backends" / "kvarn_pool.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


class Layer:
    """One layer's cache, pools and the group's slot table; requests b = 0..B-1, the last ones may
    be padding (prompt None: sequence length 0, no slot, no blocks)."""

    def __init__(self, preset: str, d: int, hkv: int, qpk: int, prompts, steps: int, seed=0):
        self.lay = layout.record_layout(preset, d)
        self.g, self.d, self.hkv, self.hq = self.lay.group, d, hkv, hkv * qpk
        g = self.g
        longest = max(p or 0 for p in prompts) + steps
        self.width = -(-longest // g)
        real = [p for p in prompts if p is not None]
        num_blocks = self.width * len(real) + 5
        pool = _pool_module()
        num_slots = pool.pool_slots_needed(len(prompts), sum(real), g)
        self.table = pool.KVarNSlotTable(num_blocks, num_slots, g, DEVICE)
        gen = torch.Generator().manual_seed(seed)
        perm = torch.randperm(num_blocks, generator=gen)
        self.block_table = torch.zeros(len(prompts), self.width, dtype=torch.int32, device=DEVICE)
        for b in range(len(real)):
            ids = perm[b * self.width : (b + 1) * self.width]
            self.block_table[b] = ids.to(torch.int32).to(DEVICE)
        self.cache = torch.zeros(num_blocks, hkv, self.lay.size, dtype=torch.uint8, device=DEVICE)
        shape = (num_slots + 1, g, hkv, d)
        self.pool_k = torch.zeros(shape, dtype=torch.float16, device=DEVICE)
        self.pool_v = torch.zeros_like(self.pool_k)
        self.h16 = hadamard.hadamard(d, torch.float16, DEVICE)
        self.prompts = prompts
        self.lens = [p or 0 for p in prompts]  # tokens written so far
        self.gen = gen

    def prefill(self) -> None:
        """Every prompt but its last token, in one step (a prompt of one token has none)."""
        qlens = [max(n - 1, 0) for n in self.lens]
        slot_mapping, qsl = [], [0]
        for b, q in enumerate(qlens):
            ids = self.block_table[b].tolist()
            slot_mapping += [ids[p // self.g] * self.g + p % self.g for p in range(q)]
            qsl.append(qsl[-1] + q)
        plan = self.table.plan(
            self.block_table,
            torch.tensor(qlens, device=DEVICE),
            torch.tensor(qsl, device=DEVICE),
            torch.tensor(slot_mapping, dtype=torch.int64, device=DEVICE),
        )
        k, v = self.kv(len(slot_mapping))
        step.write(self.pool_k, self.pool_v, self.h16, k, v, plan.write_slots, plan.write_rows)
        self.lens = [max(n - 1, 0) for n in self.lens]

    def kv(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        k = torch.randn(n, self.hkv, self.d, generator=self.gen).to(DEVICE).half()
        v = torch.randn(n, self.hkv, self.d, generator=self.gen).to(DEVICE).half()
        return k, v

    def next_inputs(self, q_len: int = 1) -> dict[str, torch.Tensor]:
        """This step's plan (applied to the table) and tensors: ``q_len`` tokens per request (1: a
        decode step; more: speculative verification with every draft accepted)."""
        seq = [
            n + q_len if p is not None else 0 for n, p in zip(self.lens, self.prompts, strict=True)
        ]
        slot_mapping = []
        for b, n in enumerate(seq):
            if n == 0:
                slot_mapping += [-1] * q_len
            else:
                for pos in range(n - q_len, n):
                    block = int(self.block_table[b, pos // self.g])
                    slot_mapping.append(block * self.g + pos % self.g)
        # q_len tokens a request, padding included (a graph's batch)
        qsl = [i * q_len for i in range(len(seq) + 1)]
        seq_t = torch.tensor(seq, dtype=torch.int32, device=DEVICE)
        plan = self.last_plan = self.table.plan(
            self.block_table,
            seq_t,
            torch.tensor(qsl, device=DEVICE),
            torch.tensor(slot_mapping, dtype=torch.int64, device=DEVICE),
        )
        from kvarn_ops.triton_decode import compressed_end_from_slots

        comp_end = compressed_end_from_slots(
            self.table.decode_view, self.block_table, seq_t, self.g
        )
        t = len(seq) * q_len
        q = torch.randn(t, self.hq, self.d, generator=self.gen).to(DEVICE).half()
        k, v = self.kv(t)
        self.lens = seq
        return dict(
            query=q,
            key=k,
            value=v,
            flush_by_slot=plan.flush_by_slot,
            write_slots=plan.write_slots,
            write_rows=plan.write_rows,
            block_table=self.block_table,
            seq_lens=seq_t,
            query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=DEVICE),
            comp_end=comp_end,
            flushed=(plan.flush_by_slot >= 0).sum(),
        )


def _step(layer: Layer, state: tuple, inputs: dict, launch, ws, kernels: bool | None = None,
          out: torch.Tensor | None = None):  # fmt: skip
    cache, pool_k, pool_v = state
    return step.decode_step(
        inputs["query"],
        inputs["key"],
        inputs["value"],
        cache,
        pool_k,
        pool_v,
        layer.h16,
        inputs["flush_by_slot"],
        inputs["write_slots"],
        inputs["write_rows"],
        layer.table.decode_view,
        inputs["block_table"],
        inputs["seq_lens"],
        inputs["comp_end"],
        layer.lay,
        CFG,
        layer.d**-0.5,
        launch,
        max_model_len=layer.width * layer.g,
        workspace=ws,
        kernels=kernels,
        out=out,
    )


def _verify(layer: Layer, state: tuple, inputs: dict, q_len: int, kernels: bool | None = None):
    cache, pool_k, pool_v = state
    return step.verify_step(
        inputs["query"], inputs["key"], inputs["value"], cache, pool_k, pool_v, layer.h16,
        inputs["flush_by_slot"], inputs["write_slots"], inputs["write_rows"],
        layer.table.decode_view, inputs["block_table"], inputs["query_start_loc"],
        inputs["seq_lens"], layer.lay, CFG, layer.d**-0.5, q_len=q_len,
        max_model_len=layer.width * layer.g, kernels=kernels,
    )  # fmt: skip


def _reference_verify(layer: Layer, state: tuple, inputs: dict) -> torch.Tensor:
    cache, pool_k, pool_v = state
    return reference.reference_prefix(
        inputs["query"], cache, pool_k, pool_v, layer.table.decode_view, inputs["block_table"],
        inputs["query_start_loc"].tolist(), inputs["seq_lens"].tolist(), layer.lay, layer.h16,
        layer.d**-0.5,
    )  # fmt: skip


def _reference(layer: Layer, state: tuple, inputs: dict) -> torch.Tensor:
    cache, pool_k, pool_v = state
    return reference.reference_decode(
        inputs["query"], cache, pool_k, pool_v, layer.table.decode_view, inputs["block_table"],
        inputs["seq_lens"], layer.lay, layer.h16, layer.d**-0.5,
    )  # fmt: skip


def test_store_kernel_skips_empty_entries() -> None:
    """A list by slot with -1 entries: only the listed blocks are written, as the reference does."""
    lay = layout.record_layout("kvarn_k4v2_g64", 128)
    gen = torch.Generator().manual_seed(3)
    pk = torch.randn(4, lay.group, 2, 128, generator=gen).half().to(DEVICE)
    pv = torch.randn(4, lay.group, 2, 128, generator=gen).half().to(DEVICE)
    by_slot = torch.tensor([-1, 5, -1, 2], dtype=torch.int32, device=DEVICE)
    slots = step.slot_ids(4, torch.device(DEVICE))
    c_tri = torch.full((7, 2, lay.size), 0xAB, dtype=torch.uint8, device=DEVICE)
    c_ref = c_tri.clone()
    triton_store.store_blocks(c_tri, pk, pv, slots, by_slot, lay, 2)
    reference.flush_reference(c_ref, pk, pv, slots, by_slot, lay, 2)
    untouched = torch.tensor([0, 1, 3, 4, 6], device=DEVICE)
    assert (c_tri[untouched] == 0xAB).all() and (c_ref[untouched] == 0xAB).all()
    assert not (c_tri[[2, 5]] == 0xAB).all()
    kt, vt = quant.dequantize_blocks(c_tri[[2, 5]].reshape(-1, lay.size), lay)
    kr, vr = quant.dequantize_blocks(c_ref[[2, 5]].reshape(-1, lay.size), lay)
    assert ((kt - kr).norm() / kr.norm()).item() <= 1e-2
    assert ((vt - vr).norm() / vr.norm()).item() <= 1e-2


@pytest.mark.parametrize("d", [128, 256])
def test_rotate_write_kernel_matches_the_torch_write(d: int) -> None:
    """The fused rotate-and-write against step.write's torch form: the same pool bits but for the
    last ulp of a few values (fp32 sums in another order), padding tokens into the last slot only."""
    gen = torch.Generator().manual_seed(5)
    k = torch.randn(5, 2, d, generator=gen).half().to(DEVICE)
    v = torch.randn(5, 2, d, generator=gen).half().to(DEVICE)
    h16 = hadamard.hadamard(d, torch.float16, DEVICE)
    slots = torch.tensor([2, -1, 0, 2, 1], dtype=torch.int64, device=DEVICE)
    rows = torch.tensor([0, 0, 63, 5, 7], dtype=torch.int64, device=DEVICE)
    pools = [torch.zeros(4, 64, 2, d, dtype=torch.float16, device=DEVICE) for _ in range(4)]
    step.write(pools[0], pools[1], h16, k, v, slots, rows, kernels=False)
    triton_store.rotate_write(pools[2], pools[3], h16, k, v, slots, rows)
    for torch_form, kernel in ((pools[0], pools[2]), (pools[1], pools[3])):
        diff = (torch_form.float() - kernel.float()).abs()
        assert diff.max().item() <= 2e-3, diff.max().item()
        assert (diff > 0).float().mean().item() <= 0.01
        assert kernel[:3].count_nonzero() == 4 * 2 * d  # four tokens written, nothing else
        assert kernel[3].any(), "the padding token did not go to the last slot"


def test_flush_write_is_the_flush_then_the_write() -> None:
    """The step's one launch (``step.flush_write``, fused) against the store kernel then the write
    kernel (its other way, and its choice in the interpreter: 4 tokens x 2 heads x 4 column blocks
    are more programs than the 4 "SMs" it counts): the same cache bits and pools, with a slot flushed and given a token in the same step (its
    flush must read the slot before the token lands: the test tells the two orders apart), a token
    in a slot that is not flushed, a padding token, and a step with nothing to flush."""
    lay = layout.record_layout("kvarn_k4v2_g64", 128)
    gen = torch.Generator().manual_seed(11)
    n_slots, hkv, d = 5, 2, 128
    pk = torch.randn(n_slots + 1, lay.group, hkv, d, generator=gen).half().to(DEVICE)
    pv = torch.randn(n_slots + 1, lay.group, hkv, d, generator=gen).half().to(DEVICE)
    h16 = hadamard.hadamard(d, torch.float16, DEVICE)
    key = torch.randn(4, hkv, d, generator=gen).half().to(DEVICE)
    value = torch.randn(4, hkv, d, generator=gen).half().to(DEVICE)
    w_slots = torch.tensor([1, 2, -1, 3], dtype=torch.int64, device=DEVICE)
    w_rows = torch.tensor([0, 5, 7, 0], dtype=torch.int64, device=DEVICE)
    for flush in ([-1, 3, -1, 6, -1], [-1] * n_slots):
        by_slot = torch.tensor(flush, dtype=torch.int32, device=DEVICE)
        runs = {}
        for way in ("one launch", "two launches", "step's choice", "write first"):
            cache = torch.full((8, hkv, lay.size), 0xAB, dtype=torch.uint8, device=DEVICE)
            k2, v2 = pk.clone(), pv.clone()
            if way != "write first":
                fused = {"one launch": True, "two launches": False}.get(way)
                step.flush_write(cache, k2, v2, by_slot, h16, key, value, w_slots, w_rows, lay, 2,
                                 kernels=True, fused=fused)  # fmt: skip
            else:
                triton_store.rotate_write(k2, v2, h16, key, value, w_slots, w_rows)
                ids = step.slot_ids(n_slots, torch.device(DEVICE))
                triton_store.store_blocks(cache, k2, v2, ids, by_slot, lay, 2)
            runs[way] = (cache, k2, v2)
        (c1, k1, v1), (c2, k2, v2) = runs["one launch"], runs["two launches"]
        # the H200's 132 SMs take the 32 programs in one wave: there the choice is the one launch
        chosen = runs["one launch" if CUDA else "two launches"]
        assert all(torch.equal(a, b) for a, b in zip(runs["step's choice"], chosen, strict=True))
        assert torch.equal(c1, c2)
        written = torch.zeros(n_slots + 1, lay.group, dtype=torch.bool, device=DEVICE)
        written[[1, 2, n_slots, 3], [0, 5, 7, 0]] = True  # padding goes to the last slot
        for a, b, orig in ((k1, k2, pk), (v1, v2, pv)):
            # the write's sums: the last ulp may differ on CUDA (another warp count)
            assert torch.allclose(a.float(), b.float(), rtol=2**-10, atol=1e-3)
            assert torch.equal(a[~written], orig[~written]) and (a[written] != orig[written]).any()
        if flush[1] >= 0:
            assert not torch.equal(c1, runs["write first"][0]), "the test cannot tell the orders"
            assert (c1[[0, 1, 2, 4, 5, 7]] == 0xAB).all() and not (c1[[3, 6]] == 0xAB).all()
        else:
            assert (c1 == 0xAB).all()


def test_flush_programs_take_their_entries_in_turn() -> None:
    """A flush program takes entries g, g + groups, ... of the list (``flush_groups``): three set
    entries of one program (1, 5, 9 of 23 at 2 groups in the interpreter; the one launch's write
    leaves room for 1 group, which takes all four) and one of another, two
    of the flushed slots given a token this step, flushed and written as the torch reference
    does, by the one launch and by the two; every entry is some program's, and a launch's
    programs fit one wave of the SMs beside the write's."""
    for n in (0, 1, 5, 67, 835, 5000):
        for hkv, sms, busy in ((2, 4, 0), (4, 132, 0), (4, 132, 32), (8, 132, 32), (8, 132, 200)):
            groups, epp = triton_store.flush_groups(n, hkv, sms, busy)
            assert groups <= n and groups * epp >= n and epp & (epp - 1) == 0
            assert (n == 0) == (groups == 0)
            assert n == 0 or busy + groups * hkv <= max(sms, busy + hkv)
    assert triton_store.flush_groups(835, 4, 132, 32) == (25, 64)  # was 66 a head, 2-3 waves
    lay = layout.record_layout("kvarn_k4v2_g64", 128)
    gen = torch.Generator().manual_seed(13)
    n_slots, hkv, d = 23, 2, 128
    if not CUDA:
        assert triton_store.flush_groups(n_slots, hkv, 4) == (2, 16)
        assert triton_store.flush_groups(n_slots, hkv, 4, 4) == (1, 32)
    pk = torch.randn(n_slots + 1, lay.group, hkv, d, generator=gen).half().to(DEVICE)
    pv = torch.randn(n_slots + 1, lay.group, hkv, d, generator=gen).half().to(DEVICE)
    h16 = hadamard.hadamard(d, torch.float16, DEVICE)
    key = torch.randn(3, hkv, d, generator=gen).half().to(DEVICE)
    value = torch.randn(3, hkv, d, generator=gen).half().to(DEVICE)
    w_slots = torch.tensor([5, 3, 9], dtype=torch.int64, device=DEVICE)
    w_rows = torch.tensor([0, 4, 0], dtype=torch.int64, device=DEVICE)
    by_slot = torch.full((n_slots,), -1, dtype=torch.int32, device=DEVICE)
    by_slot[[1, 5, 9, 2]] = torch.tensor([7, 0, 3, 10], dtype=torch.int32, device=DEVICE)
    runs = []
    for fused in (True, False, None):
        cache = torch.full((12, hkv, lay.size), 0xAB, dtype=torch.uint8, device=DEVICE)
        k2, v2 = pk.clone(), pv.clone()
        step.flush_write(cache, k2, v2, by_slot, h16, key, value, w_slots, w_rows, lay, 2,
                         kernels=fused is not None, fused=fused)  # fmt: skip
        runs.append((cache, k2, v2))
    (c1, k1, v1), (c2, k2, v2), (cr, kr, vr) = runs
    assert torch.equal(c1, c2)
    flushed = [7, 0, 3, 10]
    rest = [b for b in range(12) if b not in flushed]
    assert (c1[rest] == 0xAB).all() and not (c1[flushed] == 0xAB).all()
    kt, vt = quant.dequantize_blocks(c1[flushed].reshape(-1, lay.size), lay)
    kw, vw = quant.dequantize_blocks(cr[flushed].reshape(-1, lay.size), lay)
    assert ((kt - kw).norm() / kw.norm()).item() <= 1e-2
    assert ((vt - vw).norm() / vw.norm()).item() <= 1e-2
    for a, b, ref in ((k1, k2, kr), (v1, v2, vr)):
        assert torch.allclose(a.float(), b.float(), rtol=2**-10, atol=1e-3)
        assert torch.allclose(a.float(), ref.float(), rtol=2**-10, atol=2e-3)


def test_plan_lists_the_same_flushes_by_slot() -> None:
    """flush_by_slot holds exactly the (slot, block) pairs of the per-request lists."""
    layer = Layer("kvarn_k4v2_g64", 128, 2, 2, [150, 1, 300, None], steps=4)
    layer.prefill()
    seen = 0
    for _ in range(3):
        inputs = layer.next_inputs()
        plan = layer.last_plan
        assert inputs["flush_by_slot"].shape[0] == layer.table.num_slots
        by_slot = {(s, b) for s, b in enumerate(inputs["flush_by_slot"].tolist()) if b >= 0}
        pairs = plan.flush_slots.tolist(), plan.flush_blocks.tolist()
        listed = {(s, b) for s, b in zip(*pairs, strict=True) if s >= 0}
        assert by_slot == listed
        seen += len(listed)
    assert seen >= 2, "the stream flushed too little to compare"


def _capture(run, state: tuple) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """``run()`` warmed up (compiles, binds the launch) then captured in a CUDA graph; a step is not
    idempotent (a slot its flush frees may take this step's token), so ``state`` is put back
    before the first replay. Returns the graph and its output tensor."""
    saved = [t.clone() for t in state]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    for t, s in zip(state, saved, strict=True):
        t.copy_(s)
    return graph, out


def _without_sync(run) -> torch.Tensor:
    """``run()`` with CUDA's sync debug mode at "error": a host sync in it raises."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        return run()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.skipif(CUDA, reason="the interpreter run; on CUDA the graph test below covers it")
def test_step_with_the_kernels_in_the_interpreter() -> None:
    """8 steps through the kernels (interpreter): a flush of a prefilled block in the first step, a
    one-token prompt (nothing committed), a block crossing, a padding row; each step's output
    against the reference over the same cache, and padding rows exactly 0. A twin with a
    workspace takes the prepared launches from its second step on (``step._prepare``): the same
    bits as the plain step every step, the same cache and pools at the end, and a wrong ``out``
    refused on that path too, before anything is written."""
    from kvarn_ops.triton_decode import DecodeWorkspace

    layer = Layer("kvarn_k4v2_g64", 128, 2, 2, [60, 1, 130, None], steps=8)
    layer.prefill()
    state = (layer.cache, layer.pool_k, layer.pool_v)
    twin = (layer.cache.clone(), layer.pool_k.clone(), layer.pool_v.clone())
    launch = step.fixed_launch(4, 2, 128, layer.width * layer.g, layer.g, CFG, layer.cache.device)
    ws = DecodeWorkspace()
    flushed = 0
    for i in range(8):
        inputs = layer.next_inputs()
        flushed += int(inputs["flushed"])
        out = _step(layer, state, inputs, launch, None, kernels=True)
        if i == 1:
            assert len(ws.steps) == 1  # the next call is a prepared one
            kept = [t.clone() for t in twin]
            with pytest.raises(ValueError, match="out"):
                _step(layer, twin, inputs, launch, ws, kernels=True, out=out[:2])
            assert all(torch.equal(a, b) for a, b in zip(kept, twin, strict=True))
        assert torch.equal(_step(layer, twin, inputs, launch, ws, kernels=True), out)
        ref = _reference(layer, state, inputs)
        assert not out[3].any(), "the padding row is not 0"
        assert ks.cosine(out[:3], ref[:3]).min().item() >= 0.999
    assert all(torch.equal(a, b) for a, b in zip(state, twin, strict=True))
    assert flushed >= 1, "the stream flushed nothing"
    assert layer.lens[:3] == [67, 8, 137]


@pytest.mark.skipif(CUDA, reason="the interpreter run; on CUDA the graph test below covers it")
def test_verify_step_with_the_kernels_in_the_interpreter() -> None:
    """Speculative verification, 3 tokens a request, 5 steps through the kernels (interpreter): a
    flush of a prefilled block, a one-token prompt, block crossings inside a step, a padding
    request; each step against the reference over the same cache, padding rows exactly 0."""
    layer = Layer("kvarn_k4v2_g64", 128, 2, 2, [60, 1, 125, None], steps=15)
    layer.prefill()
    state = (layer.cache, layer.pool_k, layer.pool_v)
    flushed = 0
    for _ in range(5):
        inputs = layer.next_inputs(q_len=3)
        flushed += int(inputs["flushed"])
        out = _verify(layer, state, inputs, 3, kernels=True)
        ref = _reference_verify(layer, state, inputs)
        assert not out[9:].any(), "the padding request is not 0"
        assert ks.cosine(out[:9], ref[:9]).min().item() >= 0.999
    assert flushed >= 1, "the stream flushed nothing"
    assert layer.lens[:3] == [74, 15, 139]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("q_len", [2, 4, 16])
def test_verify_step_in_a_cuda_graph(d: int, q_len: int) -> None:
    """Speculative verification (q_len tokens a request) captured once and replayed over 60 steps
    beside an eager twin: the same bits every step, the same cache and pools at the end; against
    the reference every 10 steps (cosine >= 0.999); the padding request 0; no host sync."""
    layer = Layer("kvarn_k4v2_g128", d, 2, 4, [120, 1, 300, 2000, None], steps=60 * q_len)
    layer.prefill()
    twin = (layer.cache.clone(), layer.pool_k.clone(), layer.pool_v.clone())
    mine = (layer.cache, layer.pool_k, layer.pool_v)
    first = layer.next_inputs(q_len)
    static = {k: v.clone() for k, v in first.items()}
    graph, out = _capture(lambda: _verify(layer, mine, static, q_len), mine)
    inputs, flushed = first, 0
    for i in range(60):
        if i:
            inputs = layer.next_inputs(q_len)
            for k, v in inputs.items():
                static[k].copy_(v)
        graph.replay()
        want = _without_sync(lambda i=inputs: _verify(layer, twin, i, q_len))
        assert torch.equal(out, want), f"step {i}: the graph and the eager step differ"
        flushed += int(inputs["flushed"])
        assert not out[-q_len:].any(), f"step {i}: the padding request is not 0"
        if i % 10 == 9:
            ref = _reference_verify(layer, twin, inputs)
            cos = ks.cosine(out[:-q_len], ref[:-q_len]).min().item()
            assert cos >= 0.999, (i, cos)
    torch.cuda.synchronize()
    # The last pool slot is the trash that padding tokens go to: the padding request's q_len
    # tokens race for its rows there (never read), so it is left out.
    assert torch.equal(mine[0], twin[0]) and torch.equal(mine[1][:-1], twin[1][:-1])
    assert torch.equal(mine[2][:-1], twin[2][:-1])
    assert flushed >= 3, flushed


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("d", [128, 256])
def test_decode_step_in_a_cuda_graph_over_200_steps(d: int) -> None:
    """Plan (eager, as the builder does) then flush + write + decode replayed from one CUDA graph
    over 200 steps with growing lengths, block crossings and flushes, beside an eager twin: the same
    output bits every step and the same cache and pools at the end; against the reference every
    20 steps (cosine >= 0.999); padding rows 0; the eager step makes no host sync."""
    layer = Layer("kvarn_k4v2_g128", d, 2, 4, [120, 1, 300, 2000, None], steps=200)
    layer.prefill()
    twin = (layer.cache.clone(), layer.pool_k.clone(), layer.pool_v.clone())
    mine = (layer.cache, layer.pool_k, layer.pool_v)
    b = len(layer.prompts)
    launch = step.fixed_launch(b, 2, d, layer.width * layer.g, layer.g, CFG, layer.cache.device)
    from kvarn_ops.triton_decode import DecodeWorkspace

    ws_graph, ws_eager = DecodeWorkspace(), DecodeWorkspace()
    first = layer.next_inputs()
    static = {k: v.clone() for k, v in first.items()}
    graph, out = _capture(lambda: _step(layer, mine, static, launch, ws_graph), mine)
    inputs, flushed, crossings = first, 0, 0
    for i in range(200):
        if i:
            inputs = layer.next_inputs()
            for k, v in inputs.items():
                static[k].copy_(v)
        graph.replay()
        want = _without_sync(lambda i=inputs: _step(layer, twin, i, launch, ws_eager))
        assert torch.equal(out, want), f"step {i}: the graph and the eager step differ"
        flushed += int(inputs["flushed"])
        crossings += sum(1 for n in layer.lens if n and n % layer.g == 1)
        assert not out[-1].any(), f"step {i}: the padding row is not 0"
        if i % 20 == 19:
            ref = _reference(layer, twin, inputs)
            cos = ks.cosine(out[:-1], ref[:-1]).min().item()
            assert cos >= 0.999, (i, cos)
    torch.cuda.synchronize()
    assert torch.equal(mine[0], twin[0]) and torch.equal(mine[1], twin[1])
    assert torch.equal(mine[2], twin[2])
    assert flushed >= 5 and crossings >= 3, (flushed, crossings)
    assert layer.lens[:-1] == [319, 200, 499, 2199]
