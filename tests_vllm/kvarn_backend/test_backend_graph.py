"""The KVarN backend's paths for steps of single-token decodes and of speculative verification
(every request 1 + k tokens), the ones vLLM may capture in a full CUDA graph (UNIFORM_BATCH), on
the CPU over a real KV-cache view.

What runs for real: the patched vLLM config objects, the KVarN builder and impl, with the torch
reference in place of the Triton kernels (no GPU here). What a CPU cannot show, the step captured
in a graph and replayed over 200 (60) steps, is tests_vllm/kvarn/test_step.py's GPU tests (the same
ops/kvarn/step.py calls). Here: the declared support, the builder's persistent buffers, and that
each path gives what the general (eager, host-reading) path gives on the same stream.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_backend_forward import Harness, _cos
from vllm.config import set_current_vllm_config
from vllm.v1.attention.backend import AttentionCGSupport
from vllm.v1.attention.backends.kvarn_attn import KVarNMetadataBuilder

STEPS = (
    [{"a": 100, "b": 150}, {"a": 1, "b": 70}]
    + [{"a": 1, "b": 1}] * 4
    + [
        {"a": 1, "b": 1, "c": 1}  # c: a prompt of one token, in a decode batch (nothing committed)
    ]
    + [{"a": 1, "b": 1, "c": 1}] * 2
)


# Speculative verification: 3 tokens a request each step (every draft accepted), a new request c
# whose 3-token prompt arrives inside a verify batch (nothing committed), block crossings.
VERIFY_STEPS = (
    [{"a": 100, "b": 150}]
    + [{"a": 3, "b": 3}] * 5
    + [{"a": 3, "b": 3, "c": 3}]
    + [{"a": 3, "b": 3, "c": 3}] * 3
)


def _run(general: bool, monkeypatch: pytest.MonkeyPatch | None = None, steps_in=STEPS):
    h = Harness()
    if general:
        assert monkeypatch is not None
        build = KVarNMetadataBuilder.build

        def general_build(self, *args, **kwargs):
            md = build(self, *args, **kwargs)
            return dataclasses.replace(md, uniform_decode=False, uniform_verify=0)

        monkeypatch.setattr(KVarNMetadataBuilder, "build", general_build)
    steps, flushes = [], []
    with set_current_vllm_config(h.cfg):
        for s in steps_in:
            steps.append(h.step(dict(s)))
            # read now: the buffers are the builder's, overwritten by the next step
            flushes.append(int((steps[-1][3].plan.flush_by_slot >= 0).sum()))
    if general:
        monkeypatch.undo()
    return h, steps, flushes


def test_the_builder_declares_graphs_for_uniform_batches() -> None:
    h = Harness()
    support = KVarNMetadataBuilder.get_cudagraph_support(h.cfg, h.builder.kv_cache_spec)
    assert support == AttentionCGSupport.UNIFORM_BATCH


def test_decode_steps_take_the_path_with_persistent_buffers() -> None:
    _h, steps, flushes = _run(general=False)
    uniform = [md.uniform_decode for _q, _o, _s, md in steps]
    assert uniform == [False, False] + [True] * 7
    ptrs = {
        (
            md.plan.write_slots.data_ptr(),
            md.plan.write_rows.data_ptr(),
            md.plan.flush_by_slot.data_ptr(),
            md.plan.committed.data_ptr(),
            md.comp_end.data_ptr(),
            md.block_slot.data_ptr(),
        )
        for _q, _o, _s, md in steps
    }
    assert len(ptrs) == 1, "a step's plan moved: a captured graph would read stale memory"
    assert sum(flushes[2:]) >= 1, "no decode step flushed: the stream tests too little"


def test_the_path_gives_what_the_general_path_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    h, fast, _f = _run(general=False)
    _h2, slow, _f2 = _run(general=True, monkeypatch=monkeypatch)
    for i, ((_q, out, sl, _md), (_q2, out2, _sl2, _md2)) in enumerate(zip(fast, slow, strict=True)):
        n = max(s.stop for s in sl.values())
        for rid, rows in sl.items():
            if i == 6 and rid == "c":
                # nothing committed: the general path attends over the raw K/V, this one over the
                # pool's fp16 rotated copy (fp16 rounding apart, the same attention)
                assert torch.allclose(out[rows].float(), out2[rows].float(), atol=3e-3)
            else:
                assert torch.equal(out[rows], out2[rows]), (i, rid)
        assert (out[n:] == 0).all()
    assert torch.equal(h.kv_cache, _h2.kv_cache), "the compressed records differ"
    # and right: the last step against exact attention over each request's unquantized K/V (c's
    # first step, a prompt of one token with nothing committed, took this path two steps before)
    q, out, sl, _md = fast[-1]
    for rid in ("a", "b", "c"):
        assert _cos(out[sl[rid]], h.dense(rid, q[sl[rid]])) > 0.99, rid


def test_verify_steps_take_the_path_with_persistent_buffers() -> None:
    _h, steps, flushes = _run(general=False, steps_in=VERIFY_STEPS)
    assert [md.uniform_verify for _q, _o, _s, md in steps] == [0] + [3] * 9
    assert not any(md.uniform_decode for _q, _o, _s, md in steps)
    ptrs = {
        (
            md.plan.write_slots.data_ptr(),
            md.plan.flush_by_slot.data_ptr(),
            md.block_slot.data_ptr(),
        )
        for _q, _o, _s, md in steps[1:]
    }
    assert len(ptrs) == 1, "a step's plan moved: a captured graph would read stale memory"
    assert sum(flushes[1:]) >= 1, "no verify step flushed: the stream tests too little"


def test_the_verify_path_gives_what_the_general_path_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Here both run the torch reference (the kernel is tests_vllm/kvarn's), through different code:
    the verify path's reference_prefix against the general path's gather + SDPA per request."""
    h, fast, _f = _run(general=False, steps_in=VERIFY_STEPS)
    h2, slow, _f2 = _run(general=True, monkeypatch=monkeypatch, steps_in=VERIFY_STEPS)
    for i, ((_q, out, sl, _md), (_q2, out2, _sl2, _md2)) in enumerate(zip(fast, slow, strict=True)):
        n = max(s.stop for s in sl.values())
        for rid, rows in sl.items():
            # fp16 outputs of two fp32 computations summed in another order: an ulp or two apart;
            # c's first step: nothing committed, the general path attends over the raw K/V
            atol = 3e-3 if (i == 6 and rid == "c") else 5e-4
            got, want = out[rows].float(), out2[rows].float()
            assert torch.allclose(got, want, atol=atol, rtol=2e-3), (i, rid)
        assert (out[n:] == 0).all()
    assert torch.equal(h.kv_cache, h2.kv_cache), "the compressed records differ"
    q, out, sl, _md = fast[-1]
    for rid in ("a", "b", "c"):
        assert _cos(out[sl[rid]], h.dense(rid, q[sl[rid]])) > 0.99, rid
