"""The KVarN backend's metadata builder and forward on the CPU, over a real KV-cache view.

What runs for real: the patched vLLM config objects, ``create_kv_cache_views`` (LBHNC), the KVarN
builder (pool plan per step) and impl (flush, pool writes, first-chunk raw attention, chunked prefill
and decode through the two-tier cache), with the part-1 torch reference in place of the Triton
kernels (no GPU here; the kernels are tested against that reference in tests_vllm/kvarn). What does
not: the model runner (the step's ``CommonAttentionMetadata`` is built here the way Model Runner V2
builds it: kernel-block slot mapping, exact device seq_lens), CUDA graphs, torch.compile.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from vllm.config import CacheConfig, SchedulerConfig, VllmConfig, set_current_vllm_config
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.attention.backends.kvarn_attn import (
    KVarNAttentionBackend,
    KVarNAttentionImpl,
    KVarNMetadataBuilder,
    kvarn_state_content_bytes,
)
from vllm.v1.attention.ops.kvarn.layout import record_layout
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheLayout,
    KVCacheTensor,
    KVQuantMode,
    create_kv_cache_views,
)

PRESET, D, HQ, HKV, NB = "kvarn_k4v4_g64", 128, 8, 2, 16
G = 64


class Harness:
    """One layer, its KV cache, builder and impl; requests with their own block lists."""

    def __init__(self) -> None:
        self.cfg = VllmConfig(
            cache_config=CacheConfig(cache_dtype=PRESET, block_size=G),
            scheduler_config=SchedulerConfig(
                max_num_seqs=4,
                max_num_batched_tokens=512,
                max_model_len=1024,
                is_encoder_decoder=False,
            ),
        )
        spec = FullAttentionSpec(
            block_size=G,
            num_kv_heads=HKV,
            head_size=D,
            dtype=torch.uint8,
            kv_quant_mode=KVQuantMode.KVARN,
            state_content_bytes=kvarn_state_content_bytes(PRESET, D),
        )
        page = spec.page_size_bytes
        self.raw = torch.zeros(page * NB, dtype=torch.int8)
        tensor = KVCacheTensor(
            size=page * NB, layers=["l0"], layer_stride=page * NB, block_stride=page
        )
        (self.kv_cache,) = create_kv_cache_views(self.raw, spec, NB, KVCacheLayout.LBHNC, tensor)
        self.cfg.compilation_config.static_forward_context["l0"] = SimpleNamespace(
            kv_cache=self.kv_cache
        )
        with set_current_vllm_config(self.cfg):
            self.impl = KVarNAttentionImpl(HQ, D, 1 / math.sqrt(D), HKV, kv_cache_dtype=PRESET)
            self.builder = KVarNMetadataBuilder(spec, ["l0"], self.cfg, torch.device("cpu"))
        self.gen = torch.Generator().manual_seed(0)
        self.k: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}
        self.blocks: dict[str, list[int]] = {}
        self.free = list(range(1, NB))

    def step(self, queries: dict[str, int]):
        """Run one step: each request appends ``n`` tokens. Returns (q, out, per-request slices)."""
        names = list(queries)
        q_all, k_all, v_all, slots, seq_lens, qsl = [], [], [], [], [], [0]
        bt = torch.zeros(len(names), 8, dtype=torch.int32)
        for i, rid in enumerate(names):
            n = queries[rid]
            past = self.k[rid].shape[0] if rid in self.k else 0
            k = torch.randn(n, HKV, D, generator=self.gen).half()
            v = torch.randn(n, HKV, D, generator=self.gen).half()
            self.k[rid] = torch.cat([self.k.get(rid, k[:0]), k])
            self.v[rid] = torch.cat([self.v.get(rid, v[:0]), v])
            blocks = self.blocks.setdefault(rid, [])
            while len(blocks) * G < past + n:
                blocks.append(self.free.pop(0))
            bt[i, : len(blocks)] = torch.tensor(blocks)
            slots += [blocks[p // G] * G + p % G for p in range(past, past + n)]
            q_all.append(torch.randn(n, HQ, D, generator=self.gen).half())
            k_all.append(k)
            v_all.append(v)
            seq_lens.append(past + n)
            qsl.append(qsl[-1] + n)
        q, k, v = torch.cat(q_all), torch.cat(k_all), torch.cat(v_all)
        pad = 3  # the runner pads the token count; padded slots are -1
        slot_mapping = torch.tensor(slots + [-1] * pad)
        q = torch.cat([q, torch.zeros(pad, HQ, D, dtype=q.dtype)])
        k = torch.cat([k, torch.zeros(pad, HKV, D, dtype=k.dtype)])
        v = torch.cat([v, torch.zeros(pad, HKV, D, dtype=v.dtype)])
        qsl_t = torch.tensor(qsl, dtype=torch.int32)
        cam = CommonAttentionMetadata(
            query_start_loc=qsl_t,
            query_start_loc_cpu=qsl_t,
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            num_reqs=len(names),
            num_actual_tokens=qsl[-1],
            max_query_len=max(queries.values()),
            max_seq_len=max(seq_lens),
            block_table_tensor=bt,
            slot_mapping=slot_mapping,
            seq_lens_cpu_upper_bound=torch.tensor(seq_lens, dtype=torch.int32),
        )
        md = self.builder.build(0, cam)
        out = torch.full((q.shape[0], HQ, D), float("nan"), dtype=torch.float16)
        kv_cache = self.cfg.compilation_config.static_forward_context["l0"].kv_cache
        self.impl.forward(None, q, k, v, kv_cache, md, output=out)
        slices = {rid: slice(qsl[i], qsl[i + 1]) for i, rid in enumerate(names)}
        return q, out, slices, md

    def reject(self, rid: str, n: int) -> None:
        """The last ``n`` tokens were rejected drafts: the sequence shrinks, its blocks stay."""
        self.k[rid], self.v[rid] = self.k[rid][:-n], self.v[rid][:-n]

    def dense(self, rid: str, q: torch.Tensor) -> torch.Tensor:
        """Exact causal attention of the request's last len(q) queries over its unquantized K/V."""
        k = self.k[rid].float().repeat_interleave(HQ // HKV, 1).transpose(0, 1)
        v = self.v[rid].float().repeat_interleave(HQ // HKV, 1).transpose(0, 1)
        n, lk = q.shape[0], k.shape[1]
        mask = torch.arange(lk)[None, :] <= torch.arange(lk - n, lk)[:, None]
        o = torch.nn.functional.scaled_dot_product_attention(
            q.float().transpose(0, 1), k, v, attn_mask=mask, scale=1 / math.sqrt(D)
        )
        return o.transpose(0, 1)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a.float().flatten(), b.float().flatten(), 0).item()


@pytest.fixture(scope="module")
def stream():
    """A request stream run once: step 1 two first chunks; step 2 a second chunk + a decode;
    then decodes; outputs kept per step."""
    h = Harness()
    with set_current_vllm_config(h.cfg):
        # Profile run: no metadata; the pool is created (charged to the profiler) and output zeroed.
        out = torch.ones(4, HQ, D, dtype=torch.float16)
        q = torch.zeros(4, HQ, D, dtype=torch.float16)
        kv = torch.zeros(4, HKV, D, dtype=torch.float16)
        h.impl.forward(None, q, kv, kv, h.kv_cache, None, output=out)
        profile = (out.clone(), h.impl.pool_k.shape)
        steps = [h.step({"a": 100, "b": 150})]
        steps.append(h.step({"a": 1, "b": 70}))
        for _ in range(5):
            steps.append(h.step({"a": 1, "b": 1}))
    return h, profile, steps


def test_profile_run_materializes_the_pool(stream):
    h, (out, pool_shape), _ = stream
    assert (out == 0).all()
    assert pool_shape == (h.impl.num_slots + 1, G, HKV, D)
    assert h.impl.num_slots == h.builder.num_slots > 0


def test_first_chunk_attends_over_raw_kv(stream):
    h, _, steps = stream
    q, out, sl, _md = steps[0]
    for rid in ("a", "b"):
        k = h.k[rid][: sl[rid].stop - sl[rid].start]
        v = h.v[rid][: sl[rid].stop - sl[rid].start]
        n = k.shape[0]
        kk = k.float().repeat_interleave(HQ // HKV, 1).transpose(0, 1)
        vv = v.float().repeat_interleave(HQ // HKV, 1).transpose(0, 1)
        mask = torch.ones(n, n, dtype=torch.bool).tril()
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[sl[rid]].float().transpose(0, 1), kk, vv, attn_mask=mask, scale=1 / math.sqrt(D)
        ).transpose(0, 1)
        assert torch.allclose(out[sl[rid]].float(), ref, atol=2e-3, rtol=2e-3)


def test_padding_rows_get_zeros(stream):
    _h, _, steps = stream
    for _q, out, sl, _md in steps:
        n = max(s.stop for s in sl.values())
        assert not torch.isnan(out[:n]).any()
        assert (out[n:] == 0).all(), "padded tokens get 0, never stale memory"


def test_before_the_kv_cache_exists_a_step_only_zeroes_its_output():
    """Graph-memory and dummy runs build metadata before the KV cache is bound."""
    h = Harness()
    h.cfg.compilation_config.static_forward_context["l0"] = SimpleNamespace(
        kv_cache=torch.tensor([])
    )
    with set_current_vllm_config(h.cfg):
        _q, out, _sl, md = h.step({"a": 3})
    assert md.block_slot is None and h.builder._table is None
    assert (out == 0).all()


def test_committed_blocks_are_flushed_into_records_and_the_sink_stays_fp16(stream):
    h, _, steps = stream
    # After step 2: a has 100 committed (blocks 0, 1), b has 150 committed (blocks 0, 1, 2).
    md = steps[1][3]
    flushed = {int(b) for b in md.plan.flush_blocks.tolist() if b >= 0}
    a0, a1 = h.blocks["a"][:2]
    b0, b1 = h.blocks["b"][:2]
    assert flushed == {b1}, "only full, committed, non-sink blocks are flushed"
    assert a1 not in flushed  # a's block 1 holds tokens 64..99 only
    records = h.kv_cache.view(NB, HKV, -1)
    assert records[b1].any(), "the flushed block's records were written"
    for sink in (a0, b0):
        assert md.block_slot[sink] >= 0 and not records[sink].any(), "sinks stay in the fp16 pool"


def test_chunked_prefill_and_decode_track_dense_attention(stream):
    """Against exact attention on the unquantized K/V. With 4-bit K and V the outputs stay close
    (measured cosine > 0.99); reading a wrong block or a stale slot drops it far below."""
    h, _, steps = stream
    for q, out, sl, md in steps[1:]:
        for rid, s in sl.items():
            n = s.stop - s.start
            # dense() over the request's K/V as of this step (later steps appended more).
            total = int(md.seq_lens[list(sl).index(rid)])
            k_now, v_now = h.k[rid][:total], h.v[rid][:total]
            saved = h.k[rid], h.v[rid]
            h.k[rid], h.v[rid] = k_now, v_now
            try:
                ref = h.dense(rid, q[s])
            finally:
                h.k[rid], h.v[rid] = saved
            assert _cos(out[s], ref) > 0.98, (rid, n, total)


def test_speculative_steps_with_rejected_drafts_track_dense_attention():
    """Verify steps of 1 + 3 tokens crossing block boundaries, most drafts rejected each time: the
    rejected tokens' pool rows are overwritten by the next step and never reach a record."""
    h = Harness()
    with set_current_vllm_config(h.cfg):
        h.step({"a": 180})
        for rejected in (3, 2, 3, 0, 3, 1, 3, 3):
            q, out, sl, md = h.step({"a": 4})
            assert _cos(out[sl["a"]], h.dense("a", q[sl["a"]])) > 0.98
            if rejected:
                h.reject("a", rejected)
        # 180 + 8 x 4 - 18 rejected = 194 tokens: blocks 1 and 2 committed and flushed, tail pooled.
        total = h.k["a"].shape[0]
        assert total >= 3 * G
        records = h.kv_cache.view(NB, HKV, -1)
        blocks = h.blocks["a"]
        assert records[blocks[1]].any() and records[blocks[2]].any()
        assert md.block_slot[blocks[0]] >= 0 and md.block_slot[blocks[total // G]] >= 0


def test_a_wrong_block_table_is_caught_by_the_same_comparison():
    """Negative control for the tolerance above: decode reading another request's blocks."""
    h = Harness()
    with set_current_vllm_config(h.cfg):
        h.step({"a": 130, "b": 130})
        h.step({"a": 1, "b": 1})
        h.blocks["a"], h.blocks["b"] = h.blocks["b"], h.blocks["a"]
        q, out, sl, _md = h.step({"a": 1, "b": 1})
    assert _cos(out[sl["a"]], h.dense("a", q[sl["a"]])) < 0.9


def test_record_size_matches_the_view():
    assert KVarNAttentionBackend.get_supported_head_sizes() == [128, 256]
    assert record_layout(PRESET, D).size == G * kvarn_state_content_bytes(PRESET, D)


def test_the_builder_gives_each_step_the_compressed_end_its_layers_decode_with():
    """comp_end is computed once a step by the builder (not by every layer's decode): right after
    the step it equals what the decode derives from the step's slot map, block table and lengths
    (the slot table is shared and moves with the next step's plan, so each step is checked when it
    ran), and the stream reaches compressed blocks ahead of the pool."""
    from vllm.v1.attention.ops.kvarn.triton_decode import compressed_end_from_slots

    h = Harness()
    seen = 0
    with set_current_vllm_config(h.cfg):
        for queries in ({"a": 100, "b": 150}, {"a": 1, "b": 70}, *([{"a": 1, "b": 1}] * 5)):
            md = h.step(queries)[3]
            assert md.comp_end is not None
            group = h.builder.preset.group
            derived = compressed_end_from_slots(md.block_slot, md.block_table, md.seq_lens, group)
            assert torch.equal(md.comp_end, derived), queries
            seen = max(seen, int(md.comp_end.max()))
    assert seen > 1  # some blocks were flushed into records (the loop has work)
