"""The fp8 e4m3 KV codecs of the quality benchmark (gpu/kvarn/kvcodecs.py, issue #40) store what vLLM
0.29.0's ``fp8`` cache stores: e4m3 codes of x / scale, saturated at +-448, read back as code * scale,
one byte per element; scales 1.0 (vLLM's default), amax / 448 per layer or per KV head from a
calibration pass, or per token and head (vLLM's ``fp8_per_token_head``). CPU only: torch alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gpu/kvarn"))

import kvcodecs as kv  # noqa: E402

E4M3_HALF_ULP = 2.0**-4  # 3 mantissa bits: round to nearest is within half a unit, relative
E4M3_MIN_NORMAL = 2.0**-6
E4M3_SUBNORMAL_HALF_STEP = 2.0**-10  # subnormals are spaced 2^-9


def _kv(hkv: int, t: int, d: int, head_scale: list[float], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, hkv, t, d, generator=g) * torch.tensor(head_scale).view(1, -1, 1, 1)
    return x.half()


def _bound(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """The largest error an e4m3 round trip of x at this scale may make, plus the fp16 rounding of
    the value read back."""
    xf = x.float().abs()
    return (
        torch.maximum(E4M3_HALF_ULP * xf, E4M3_SUBNORMAL_HALF_STEP * torch.as_tensor(scale))
        + 2.0**-11 * xf
    )


def test_store_is_one_byte_e4m3_and_load_is_fp16() -> None:
    x = _kv(2, 16, 128, [1.0, 3.0], seed=0)
    codes = kv.fp8_store(x, 1.0)
    assert codes.dtype == torch.float8_e4m3fn and codes.element_size() == 1
    assert codes.shape == x.shape
    back = kv.fp8_load(codes, 1.0)
    assert back.dtype == torch.float16
    # in range, the store is torch's own round-to-nearest-even cast
    assert torch.equal(back, x.to(torch.float8_e4m3fn).half())


@pytest.mark.parametrize("scale", [1.0, 0.01, 3.5])
def test_round_trip_error_is_within_half_an_e4m3_step(scale: float) -> None:
    x = _kv(2, 64, 128, [0.2, 4.0], seed=1)
    back = kv.fp8_load(kv.fp8_store(x, scale), scale)
    inside = x.float().abs() <= kv.FP8_MAX * scale
    err = (back.float() - x.float()).abs()
    assert bool((err[inside] <= _bound(x, scale)[inside]).all())
    # and not trivially: the round trip does change normal values
    assert err.max() > 0


def test_beyond_448_saturates_as_vllms_stores_do() -> None:
    """vLLM converts with satfinite: beyond the e4m3 range the code is +-448, never NaN."""
    x = torch.tensor([[[[500.0, -1000.0, 60000.0, 448.0, 1.0]]]]).half()
    back = kv.fp8_load(kv.fp8_store(x, 1.0), 1.0)
    assert back.flatten().tolist() == [448.0, -448.0, 448.0, 448.0, 1.0]
    assert not bool(torch.isnan(back).any())


def _calib(layers: list[tuple[list[float], list[float]]]) -> kv.Fp8Calibration:
    qkv = []
    for i, (ks, vs) in enumerate(layers):
        k, v = _kv(len(ks), 32, 64, ks, seed=10 + i), _kv(len(vs), 32, 64, vs, seed=20 + i)
        qkv.append((k, k, v))
    return kv.fp8_calibrate(qkv)


def test_calibration_is_amax_over_448_per_layer_and_head() -> None:
    cal = _calib([([1.0, 8.0], [0.5, 0.5]), ([0.01, 0.02], [2.0, 1.0])])
    assert cal.windows == 2 and len(cal.k_amax) == 2
    k0, _ = cal.scales(0, per_head=True)
    assert k0.shape == (1, 2, 1, 1)
    assert torch.allclose(k0.flatten(), cal.k_amax[0] / 448)
    kt, vt = cal.scales(1, per_head=False)
    assert kt.shape == () and float(kt) == pytest.approx(float(cal.k_amax[1].max()) / 448)
    assert float(vt) == pytest.approx(float(cal.v_amax[1].max()) / 448)
    with pytest.raises(ValueError, match="layer 2 asked"):
        cal.scales(2, per_head=False)


def test_a_head_that_is_all_zero_is_refused_naming_layer_and_side() -> None:
    k = _kv(2, 8, 64, [1.0, 1.0], seed=3)
    v = k.clone()
    v[:, 1] = 0
    with pytest.raises(ValueError, match="layer 1 V amax"):
        kv.fp8_calibrate([(k, k, k), (k, k, v)])


def test_the_codecs_bytes_and_names() -> None:
    cal = _calib([([1.0], [1.0])])
    for d in (128, 256):
        cs = {c.name: c for c in kv.fp8_codecs(d, cal)}
        assert list(cs) == ["fp8_e4m3", "fp8_e4m3_amax", "fp8_e4m3_head", "fp8_per_token_head"]
        assert cs["fp8_e4m3"].bytes_per_token == 2 * d  # 256 B at D128: K + V, one byte each
        assert cs["fp8_e4m3_head"].bytes_per_token == 2 * d
        assert cs["fp8_per_token_head"].bytes_per_token == 2 * d + 8  # two fp32 scales a token
        assert all(c.tiers == "all" and c.family == "fp8" for c in cs.values())
    assert [c.name for c in kv.fp8_codecs(128, None)] == ["fp8_e4m3", "fp8_per_token_head"]


def test_calibrated_codecs_use_each_layers_own_scales() -> None:
    """Small keys (|k| ~ 0.01, as a layer's may be) sit in e4m3's subnormals at scale 1.0; the
    calibrated scale moves them to the top of the range. Per head beats per tensor when the heads'
    ranges differ; each layer reads its own scales."""
    layers = [([0.01, 1.0], [0.01, 1.0]), ([1000.0, 1000.0], [1.0, 1.0])]
    cal = _calib(layers)
    cs = {c.name: c for c in kv.fp8_codecs(64, cal)}
    k, v = _kv(2, 32, 64, [0.01, 1.0], seed=10), _kv(2, 32, 64, [0.01, 1.0], seed=20)

    def rel_err(name: str, layer: int, head: int) -> float:
        rt = cs[name].roundtrip_at(layer)
        assert rt is not None
        kh, _ = rt(k, v)
        a, b = kh[:, head].float(), k[:, head].float()
        return float((a - b).norm() / b.norm())

    assert rel_err("fp8_e4m3", 0, 0) > 0.05  # subnormals: a few codes for the whole head
    assert rel_err("fp8_e4m3_head", 0, 0) < 0.03
    assert rel_err("fp8_e4m3_head", 0, 0) < rel_err("fp8_e4m3_amax", 0, 0)
    # layer 1's K scale is 10^5 x layer 0's head-0 one: read there, the small keys fall to subnormals
    assert rel_err("fp8_e4m3_head", 1, 0) > 2 * rel_err("fp8_e4m3_head", 0, 0)
    with pytest.raises(ValueError, match="fp8_e4m3_amax: its scales are per layer"):
        cs["fp8_e4m3_amax"].roundtrip_at(None)
    # attention, the benchmark's one path, reads the layer it is given
    q = torch.randn(2, 4, 32, 64, generator=torch.Generator().manual_seed(8)).half()
    codec = cs["fp8_e4m3_head"]
    for layer in (0, 1):
        rt = codec.roundtrip_at(layer)
        assert rt is not None
        kh, vh = rt(k, v)
        direct = torch.nn.functional.scaled_dot_product_attention(
            q, kh, vh, is_causal=True, enable_gqa=True
        )
        assert torch.equal(kv.attention(codec, q, k, v, layer=layer), direct)


def test_per_token_head_scales_each_token_to_448() -> None:
    x = _kv(2, 16, 128, [0.001, 50.0], seed=4)
    back, _ = kv.fp8_per_token_head_roundtrip(x, x)
    err = (back.float() - x.float()).abs()
    scale = (x.float().abs().amax(-1, keepdim=True) / 448).clamp_min(1e-6)
    assert bool((err <= _bound(x, scale)).all())
    # each token's largest element is stored exactly (it maps to the code 448)
    top = x.float().abs().argmax(-1, keepdim=True)
    assert torch.equal(back.gather(-1, top), x.gather(-1, top))


def test_attention_through_an_fp8_codec_is_close_to_fp16() -> None:
    cal = _calib([([2.0, 2.0], [1.0, 1.0])])
    k, v = _kv(2, 200, 64, [2.0, 2.0], seed=5)[:1], _kv(2, 200, 64, [1.0, 1.0], seed=6)[:1]
    q = (torch.randn(1, 4, 200, 64, generator=torch.Generator().manual_seed(7)) * 0.3).half()
    ref = kv.attention(kv.fp16_codec(64), q, k, v).float()
    for c in kv.fp8_codecs(64, cal):
        got = kv.attention(c, q, k, v, layer=0).float()
        cos = torch.nn.functional.cosine_similarity(ref, got, dim=-1).min()
        assert 0.995 < float(cos) < 1.0, c.name
