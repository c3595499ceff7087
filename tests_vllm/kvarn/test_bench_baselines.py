"""The baselines benchmark (gpu/kvarn/bench_baselines.py, issue #40) measures what it says.

- CPU: the shuffled page table covers every page once and points at each request's newest token;
  the best baseline is the fastest column that ran, errors never win, and the table says so.
- GPU with FlashInfer (skipped without either): the timed FlashInfer step, fp16 and fp8, with and
  without tensor cores, gives SDPA's answer over the same pages read through the table, with the
  step's new token in place: a wrong table, layout or write would show here, not as a fast time.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gpu/kvarn"))

import bench_baselines as bb  # noqa: E402


@pytest.mark.parametrize("ctx", [16, 100, 8192])
def test_page_table_covers_every_page_once_and_finds_the_newest_token(ctx: int) -> None:
    b = 3
    t = bb.page_table(b, ctx, 16, torch.Generator().manual_seed(1))
    per = -(-ctx // 16)
    assert sorted(t["indices"].tolist()) == list(range(b * per))
    assert t["indptr"].tolist() == [i * per for i in range(b + 1)]
    assert t["indices"].tolist() != list(range(b * per)) or b * per == 1  # shuffled
    for i in range(b):
        pages = t["indices"][t["indptr"][i] : t["indptr"][i + 1]]
        tokens = (per - 1) * 16 + int(t["last_page_len"][i])
        assert tokens == ctx
        assert int(t["last_page"][i]) == int(pages[-1])
        assert int(t["last_off"][i]) == (ctx - 1) % 16


def test_best_baseline_is_the_fastest_column_that_ran() -> None:
    row = {"sdpa_gqa_graph_us": 30.0, "fi_fp16_graph_us": 25.0, "fi_fp8_tc_graph_us": 23.5,
           "fi_fp8_error": "RuntimeError: jit", "kvarn_graph_us": 47.0}  # fmt: skip
    assert bb.best_baseline(row) == ("fi_fp8_tc", 23.5)
    assert bb.best_baseline({"fi_fp8_error": "x"}) == (None, None)
    assert bb.best_baseline({"sdpa_gqa_graph_us": None, "fi_fp16_graph_us": 9.0}) == (
        "fi_fp16",
        9.0,
    )


def test_the_table_gives_the_ratio_and_names_errors_and_skips() -> None:
    meta = {"device": "H200", "sms": 132, "torch": "2.11", "triton": "3.6", "flashinfer": "0.6.18",
            "preset": "kvarn_k4v2_g128"}  # fmt: skip
    rows = [
        {"D": 128, "Hq": 32, "Hkv": 8, "batch": 1, "ctx": 8192, "kvarn_graph_us": 30.0,
         "sdpa_gqa_graph_us": 28.4, "fi_fp8_tc_graph_us": 24.0, "fi_fp16_error": "OOM: x",
         "kvarn_decode_host_us": 25.0, "kvarn_step_host_us": 35.0},
        {"D": 256, "Hq": 24, "Hkv": 4, "batch": 128, "ctx": 131072, "skipped": "past deadline"},
    ]  # fmt: skip
    md = bb.table_md(meta, rows).splitlines()
    first = md[4]
    assert "24.0 (fi_fp8_tc)" in first and "0.80×" in first and "| error |" in first
    assert "25.0 / 35.0" in first
    assert "skipped: past deadline" in md[5]
    assert "- fi_fp16_error: OOM: x" in md
    assert all(line.count("|") == md[2].count("|") for line in md[2:6])


needs_fi = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("flashinfer") is None,
    reason="needs a CUDA GPU and flashinfer (the GPU machine, with the wheels carried)",
)


@needs_fi
@pytest.mark.parametrize("kv", ["fp16", "fp8"])
@pytest.mark.parametrize("tc", [False, True])
@pytest.mark.parametrize(("d", "hq", "hkv"), [(128, 32, 8), (256, 24, 4)])
def test_the_flashinfer_step_is_sdpa_over_the_same_pages(kv, tc, d, hq, hkv) -> None:
    import flashinfer

    torch.manual_seed(0)
    b, ctx = 3, 100
    tbl = bb.page_table(b, ctx, bb.PAGE, torch.Generator().manual_seed(2))
    cache = bb.fi_cache(b, ctx, d, hkv, kv, tbl)
    run = bb.fi_step(flashinfer, cache, tbl, hq, d, tc)
    got = run().float()
    idx = tbl["indices"].long().view(b, -1).cuda()
    kv_ = cache[idx].float()  # [b, pages, 2, PAGE, hkv, d]: read back after the step's write
    k = kv_[:, :, 0].reshape(b, -1, hkv, d)[:, :ctx].transpose(1, 2)
    v = kv_[:, :, 1].reshape(b, -1, hkv, d)[:, :ctx].transpose(1, 2)
    q = _keep_q(run)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float().unsqueeze(2), k, v, enable_gqa=True
    ).squeeze(2)
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0).item()
    assert cos > 0.999, cos
    # the step wrote its new token: the newest position holds it, not the random fill
    new_k = _closure(run, "raw_k").view(cache.dtype).float()
    assert torch.equal(k[torch.arange(b), :, ctx - 1].cpu(), new_k.cpu())


def _closure(fn, name: str):
    return fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents


def _keep_q(run) -> torch.Tensor:
    return _closure(run, "q")
