"""The fused multi-token kernel (ops/kvarn/triton_prefix.py) against the torch reference.

Caches are built as the backend builds them (``kvarn_scenario``: pool writes, the two-tier
bookkeeping, flushes), so a request's keys come from compressed records and from pool slots, with
NaN in every pool row nobody wrote. The last ``q_len`` tokens of each request are its queries: they
attend causally over every token before them and to themselves. On the CPU the kernel runs in
Triton's interpreter on small shapes (CI); on CUDA the issue's sizes: 2-16 speculative tokens and
prefill chunks up to 2,048 over longer prefixes, cosine >= 0.999 per row against the reference.
"""

from __future__ import annotations

import kvarn_scenario as ks
import pytest
import torch
from kvarn_ops import reference, triton_prefix

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


def _case(preset, d, hkv, qpk, seq_lens, q_lens, seed=0):
    sc = ks.build(preset, d, hkv, seq_lens, device=DEVICE, iters=2, seed=seed)
    qsl = [0]
    for n in q_lens:
        qsl.append(qsl[-1] + n)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(qsl[-1], hkv * qpk, d, generator=gen).half().to(DEVICE)
    return sc, q, qsl


def _run(sc, q, qsl, seq_lens, **kw):
    dev = q.device
    scale = sc.layout.head_dim**-0.5
    got = triton_prefix.kvarn_prefix_attention(
        q,
        sc.cache,
        sc.pool_k,
        sc.pool_v,
        sc.block_slot,
        sc.block_table,
        torch.tensor(qsl, dtype=torch.int32, device=dev),
        sc.seq_lens,
        sc.layout,
        sc.h16,
        scale,
        query_start_loc_cpu=qsl,
        seq_lens_cpu=seq_lens,
        **kw,
    )
    want = reference.reference_prefix(
        q,
        sc.cache,
        sc.pool_k,
        sc.pool_v,
        sc.block_slot,
        sc.block_table,
        qsl,
        seq_lens,
        sc.layout,
        sc.h16,
        scale,
    )
    return got, want


def _assert_close(got, want, qsl, requests=None):
    rows = (
        range(qsl[-1])
        if requests is None
        else [t for i in requests for t in range(qsl[i], qsl[i + 1])]
    )
    idx = torch.tensor(list(rows), dtype=torch.long, device=got.device)
    g, w = got[idx], want[idx]
    assert torch.isfinite(g).all()
    cos = ks.cosine(g, w)
    assert float(cos.min()) >= 0.999, float(cos.min())
    assert float((g - w).abs().max()) <= 2e-2 * float(w.abs().max())


# Requests: a continuation chunk over two compressed blocks, 3 speculative tokens, one token, a
# first chunk (q_len == seq_len: nothing before it), a chunk that starts mid-block.
CPU_SEQ = [300, 197, 70, 48, 211]
CPU_Q = [40, 3, 1, 48, 77]


@pytest.mark.parametrize("path", ["fused", "dense", "auto"])
@pytest.mark.parametrize(
    ("preset", "d"), [("kvarn_k4v2_g128", 128), ("kvarn_k4v4_g64", 128), ("kvarn_k4v2_g64", 256)]
)
def test_prefix_matches_reference(preset, d, path):
    """Both ways (and the per-request choice between them) against the reference."""
    sc, q, qsl = _case(preset, d, 2, 4, CPU_SEQ, CPU_Q)
    assert sc.flushed_blocks > 0  # records are read, not only the pool
    got, want = _run(sc, q, qsl, CPU_SEQ, path=path)
    _assert_close(got, want, qsl)


@pytest.mark.parametrize("splits", [2, 5])
def test_prefix_split_k(splits):
    """Key ranges split and combined give what one range gives (some splits reach no key of a row:
    their -inf log-sum-exp must weigh nothing)."""
    sc, q, qsl = _case("kvarn_k4v2_g128", 128, 2, 2, CPU_SEQ, CPU_Q, seed=3)
    got, want = _run(sc, q, qsl, CPU_SEQ, num_splits=splits, path="fused")
    _assert_close(got, want, qsl)


def test_prefix_requests_subset():
    """Only the requests listed are computed (the backend sends decodes elsewhere)."""
    sc, q, qsl = _case("kvarn_k4v2_g128", 128, 2, 4, CPU_SEQ, CPU_Q, seed=5)
    got, want = _run(sc, q, qsl, CPU_SEQ, requests=[0, 4], path="auto")
    _assert_close(got, want, qsl, requests=[0, 4])


def test_prefix_tiles_cover_rows():
    qsl = [0, 3, 3, 40]
    reqs, first = triton_prefix.prefix_tiles(qsl, [0, 1, 2], 8, 16)
    # request 0: 24 rows -> 2 tiles; request 1: no rows; request 2: 296 rows -> 19 tiles
    assert reqs == [0, 0] + [2] * 19
    assert first[:2] == [0, 16] and first[-1] == 288
    assert triton_prefix.block_m_for(3 * 8) == 32
    assert triton_prefix.block_m_for(1) == 16
    assert triton_prefix.block_m_for(2048 * 8) == 64


@pytest.mark.parametrize(
    ("heads", "kw", "match"),
    [(7, {}, "not a multiple of KV heads"), (8, {"path": "bogus"}, "choose auto, fused or dense")],
)
def test_prefix_rejects_bad_arguments(heads, kw, match):
    sc, q, qsl = _case("kvarn_k4v2_g128", 128, 2, 4, [70], [4])
    with pytest.raises(ValueError, match=match):
        triton_prefix.kvarn_prefix_attention(
            q[:, :heads],
            sc.cache,
            sc.pool_k,
            sc.pool_v,
            sc.block_slot,
            sc.block_table,
            torch.tensor(qsl, dtype=torch.int32, device=q.device),
            sc.seq_lens,
            sc.layout,
            sc.h16,
            0.1,
            query_start_loc_cpu=qsl,
            seq_lens_cpu=[70],
            **kw,
        )


@pytest.mark.skipif(not CUDA, reason="CUDA only: the issue's sizes (the interpreter is too slow)")
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize(
    ("seq_lens", "q_lens"),
    [
        ([8192, 3000, 20000, 129], [2, 4, 16, 8]),  # speculative verification
        ([2048 + 4096, 1000, 2048], [2048, 512, 2048]),  # chunks; the last a first chunk
        ([33000], [1024]),
    ],
)
@pytest.mark.parametrize("path", ["auto", "fused"])
def test_prefix_gpu_sizes(d, seq_lens, q_lens, path):
    sc, q, qsl = _case("kvarn_k4v2_g128", d, 8, 4, seq_lens, q_lens, seed=7)
    got, want = _run(sc, q, qsl, seq_lens, path=path)
    _assert_close(got, want, qsl)
