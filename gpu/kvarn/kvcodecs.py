"""KV-cache codecs for the quality benchmark, and attention that reads K/V as a decode step would.

Each codec turns a layer's post-RoPE K and V ([B, Hkv, T, D], fp16) into what attention reads back
(K̂, V̂, same shape), and says which keys a query sees compressed:

- ``kvarn`` tiers (KVarN and the two ablations built from its parts): tiles of G tokens; block 0 (the
  sink) and the block a query is in stay fp16, every earlier block is compressed. That is the two-tier
  book's rule: a block is flushed once all its tokens are committed (committed = seq_len - 1 in decode),
  so the query at position t reads blocks [1, t // G) from records.
- ``all``: every token, the query's own included, is read from the compressed cache (vLLM's TurboQuant
  writes each token before its decode attention reads the cache).

``attention`` then computes, in one pass over a window, what T successive decode steps compute: for
query t, keys j <= t, each taken from K or K̂ by that rule. Causality makes the one pass exact for the
whole model too: a token's hidden states at every layer depend only on its own attention, which reads
the cache as it stood at its own decode step.

KVarN runs through the package's own reference (`quant.quantize_blocks` -> records ->
`dequantize_blocks`), so the benchmark measures the codec the kernels are tested against. One
simplification: the fp16 tiers are read unrotated (the pool holds them rotated with the fp16 H); the
difference is an fp16 rounding of a rotation, which `test_quality.py` bounds against `reference_decode`.

TurboQuant's presets, packed sizes and Lloyd-Max centroids come from vLLM 0.29.0 itself, loaded at run
time from the installed vllm or from the wheel (`load_turboquant`); its store and dequantization
kernels are restated in torch here (`tq_roundtrip`) and checked byte for byte against vLLM's Triton
kernels in `tests_vllm/kvarn/test_quality.py`.

fp8 e4m3 (`fp8_codecs`) is vLLM 0.29.0's ``fp8`` cache dtype: every token stored as x / scale cast to
e4m3 with saturation, read back as code * scale. Its scale rules are restated below, next to the code.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import types
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

Roundtrip = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Codec:
    name: str
    family: str  # fp16 | kvarn | rtn | rotation | turboquant | fp8
    tiers: str  # none | kvarn | all
    group: int  # G for the kvarn tiers, 1 otherwise
    bytes_per_token: float  # per layer and KV head, the steady state (sink and tail not counted)
    roundtrip: Roundtrip | None
    skip_layers: frozenset[int] = frozenset()  # layers kept fp16 (vLLM's TurboQuant boundary skip)
    # A codec whose parameters differ per layer (fp8 scales calibrated per layer) gives its roundtrip
    # for a layer here; ``roundtrip`` is then unused.
    by_layer: Callable[[int], Roundtrip] | None = None

    def roundtrip_at(self, layer: int | None) -> Roundtrip | None:
        if self.by_layer is None:
            return self.roundtrip
        if layer is None:
            raise ValueError(f"codec {self.name}: its scales are per layer; pass the layer index")
        return self.by_layer(layer)

    def bytes_per_token_mean(self, n_layers: int, head_dim: int) -> float:
        """Bytes per token, layer and KV head, averaged over the layers (skipped ones are fp16)."""
        skipped = len(self.skip_layers)
        return ((n_layers - skipped) * self.bytes_per_token + skipped * 4 * head_dim) / n_layers


def compressed_mask(tiers: str, t: int, group: int, device: torch.device) -> torch.Tensor:
    """[T, T] bool: query i reads key j from the compressed cache (only j <= i is ever used)."""
    if tiers == "none":
        return torch.zeros(t, t, dtype=torch.bool, device=device)
    if tiers == "all":
        return torch.ones(t, t, dtype=torch.bool, device=device)
    blk = torch.arange(t, device=device) // group
    return (blk[None, :] >= 1) & (blk[None, :] < blk[:, None])


def attention(
    codec: Codec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int | None = None
) -> torch.Tensor:
    """Causal attention of q [B, Hq, T, D] over k, v [B, Hkv, T, D] as read through ``codec``."""
    q, k, v = q.half(), k.half(), v.half()
    gqa = k.shape[1] != q.shape[1]
    roundtrip = codec.roundtrip_at(layer)
    if roundtrip is None or layer in codec.skip_layers:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    kh, vh = roundtrip(k, v)
    if codec.tiers == "all":
        return F.scaled_dot_product_attention(q, kh, vh, is_causal=True, enable_gqa=gqa)
    t = q.shape[2]
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    comp = compressed_mask(codec.tiers, t, codec.group, q.device)
    mask = torch.cat([causal & ~comp, causal & comp], dim=-1)  # keys: [exact | compressed]
    rep = q.shape[1] // k.shape[1]
    k2 = torch.cat([k, kh], dim=2).repeat_interleave(rep, dim=1)
    v2 = torch.cat([v, vh], dim=2).repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask)


# -- the KVarN family: tiles of G tokens -------------------------------------------------------------


def _tiles(x: torch.Tensor, g: int) -> torch.Tensor:
    b, h, t, d = x.shape
    return x[:, :, : t - t % g].reshape(b, h, t // g, g, d).reshape(-1, g, d)


def _untiles(tiles: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    b, h, t, d = like.shape
    full = t - t % tiles.shape[1]
    out = like.clone()  # a partial last block is never read compressed
    out[:, :, :full] = tiles.reshape(b, h, full, d).to(like.dtype)
    return out


def kvarn_family(ops, preset_name: str, head_dim: int, iters: int = 8) -> list[Codec]:
    """KVarN (rotation + variance normalization + RTN, the real records) and its two ablations at the
    same bits and tiles: plain RTN (no rotation, no normalization: K per channel, V per token) and
    rotation only (no normalization)."""
    from importlib import import_module

    quant = import_module(f"{ops.__name__}.quant")
    had = import_module(f"{ops.__name__}.hadamard")
    layout = ops.record_layout(preset_name, head_dim)
    p, g, d = layout.preset, layout.group, head_dim

    def kvarn(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h16 = had.hadamard(d, torch.float16, k.device)
        kr, vr = had.rotate(_tiles(k, g), h16), had.rotate(_tiles(v, g), h16)
        kd, vd = quant.dequantize_blocks(quant.quantize_blocks(kr, vr, layout, iters), layout)
        h = h16.float()
        return _untiles(kd @ h, k), _untiles(vd @ h, v)

    def rtn(rotate: bool) -> Roundtrip:
        def roundtrip(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            kt, vt = _tiles(k, g), _tiles(v, g)
            if rotate:
                h16 = had.hadamard(d, torch.float16, k.device)
                kt, vt = had.rotate(kt, h16), had.rotate(vt, h16)
            kd = quant.dequantize_k(quant.quantize_k(kt, p.k_bits, 0))
            vd = quant.dequantize_v(quant.quantize_v(vt, p.v_bits, 0))
            if rotate:
                kd, vd = kd @ h16.float(), vd @ h16.float()
            return _untiles(kd, k), _untiles(vd, v)

        return roundtrip

    def split(v_iters: int) -> Roundtrip:
        # K as KVarN stores it; V normalized for ``v_iters`` iterations only (0: rotation only).
        def roundtrip(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h16 = had.hadamard(d, torch.float16, k.device)
            kr, vr = had.rotate(_tiles(k, g), h16), had.rotate(_tiles(v, g), h16)
            kd = quant.dequantize_k(quant.quantize_k(kr, p.k_bits, iters))
            vd = quant.dequantize_v(quant.quantize_v(vr, p.v_bits, v_iters))
            return _untiles(kd @ h16.float(), k), _untiles(vd @ h16.float(), v)

        return roundtrip

    # Plain RTN needs no folded normalization scales: K codes + fp16 scale and zero per channel,
    # V codes + fp16 scale and zero per token.
    rtn_bytes = (d * g * (p.k_bits + p.v_bits) / 8 + 2 * 2 * d + 2 * 2 * g) / g
    tag = preset_name.removeprefix("kvarn_")
    return [
        Codec(preset_name, "kvarn", "kvarn", g, layout.size / g, kvarn),
        Codec(f"rtn_{tag}", "rtn", "kvarn", g, rtn_bytes, rtn(False)),
        Codec(f"rotation_{tag}", "rotation", "kvarn", g, rtn_bytes, rtn(True)),
        # a variant, not a preset: V rotated but not normalized, in the same record
        Codec(f"{preset_name}_vrot", "kvarn-variant", "kvarn", g, layout.size / g, split(0)),
    ]


def fp16_codec(head_dim: int) -> Codec:
    return Codec("fp16", "fp16", "none", 1, 2 * 2 * head_dim, None)


# -- vLLM 0.29.0's TurboQuant ------------------------------------------------------------------------

TQ_DIR = "vllm/model_executor/layers/quantization/turboquant"


@dataclass(frozen=True)
class TurboQuant:
    presets: dict[str, dict]
    config_cls: type  # TurboQuantConfig
    get_centroids: Callable[[int, int], torch.Tensor]
    origin: str  # where the two modules were read from


def _exec_module(name: str, text: str, origin: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = origin
    sys.modules[name] = mod  # dataclasses look the module up while building the class
    exec(compile(text, origin, "exec"), mod.__dict__)
    return mod


def load_turboquant(source: str | Path | None = None) -> TurboQuant:
    """TurboQuant's ``config.py`` and ``centroids.py`` from vLLM 0.29.0, read from ``source`` (a wheel,
    or a directory holding ``vllm/``), else from the installed vllm. Only these two modules are read:
    they need nothing but torch (``vllm.config`` is imported for type checking only), so they load
    where vLLM itself cannot run (the GPU machine's torch is older than vLLM 0.29 needs)."""
    texts: dict[str, tuple[str, str]] = {}
    if source is None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or spec.origin is None:
            raise FileNotFoundError(
                "no vllm installed; pass the vllm-0.29.0 wheel or an extracted tree"
            )
        source = Path(spec.origin).parent.parent
    source = Path(source)
    for mod in ("config", "centroids"):
        member = f"{TQ_DIR}/{mod}.py"
        if source.suffix == ".whl":
            with zipfile.ZipFile(source) as z:
                texts[mod] = (z.read(member).decode(), f"{source}!{member}")
        else:
            path = source / member
            texts[mod] = (path.read_text(), str(path))
    cfg = _exec_module("_hqp_tq_config", *texts["config"])
    cen = _exec_module("_hqp_tq_centroids", *texts["centroids"])
    return TurboQuant(cfg.TQ_PRESETS, cfg.TurboQuantConfig, cen.get_centroids, str(source))


def tq_roundtrip(cfg, centroids: torch.Tensor) -> Roundtrip:
    """TurboQuant's store (`triton_turboquant_store`) then full dequantization (`_tq_full_dequant_kv`)
    and the inverse rotation of continuation prefill, in torch. K: the unit vector rotated by the
    Sylvester Hadamard, each coordinate bucketed to a Lloyd-Max centroid, the norm kept in fp16, the
    centroid vector renormalized when ``norm_correction``; FP8 (e4m3) keys for k8v4. V: per token
    min/max uniform codes with fp16 scale and zero."""
    d = cfg.head_dim
    c_sorted = centroids.sort().values
    midpoints = (c_sorted[:-1] + c_sorted[1:]) / 2
    qmax = (1 << cfg.value_quant_bits) - 1

    def roundtrip(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if cfg.key_fp8:
            kh = k.to(torch.float8_e4m3fn).to(torch.float16)
        else:
            h = _sylvester(d, k.device)
            kf = k.float()
            norms = kf.norm(dim=-1, keepdim=True)
            y = (kf / (norms + 1e-8)) @ h
            idx = torch.searchsorted(midpoints.to(k.device), y.contiguous(), right=True)
            c = centroids.to(k.device)[idx]
            if cfg.norm_correction:
                c = c / torch.sqrt((c * c).sum(-1, keepdim=True) + 1e-16)
            k_rot = (norms.half().float() * c).half()
            kh = k_rot @ h.half()
        vf = v.float()
        lo, hi = vf.amin(-1, keepdim=True), vf.amax(-1, keepdim=True)
        scale = (hi - lo) / qmax
        scale = torch.where(scale > 1e-8, scale, torch.full_like(scale, 1e-8))
        codes = ((vf - lo) / scale + 0.5).to(torch.int32).clamp(0, qmax)
        vh = (codes.float() * scale.half().float() + lo.half().float()).half()
        return kh, vh

    return roundtrip


def _sylvester(d: int, device: torch.device) -> torch.Tensor:
    """TurboQuant's rotation as vLLM builds it (``_build_hadamard``: fp32, divided in fp32), not
    KVarN's ``hadamard`` (built in float64, then cast): the last bit matters to match its kernels."""
    h = torch.tensor([[1.0]])
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(d)).to(device)


def turboquant_codecs(tq: TurboQuant, head_dim: int, n_layers: int) -> list[Codec]:
    """Every TurboQuant preset on every layer, and each again as vLLM runs it on a dense model: the
    first and last layers kept fp16 by the wheel's own ``get_boundary_skip_layers``."""
    model_config = types.SimpleNamespace(
        is_hybrid=False, hf_text_config=types.SimpleNamespace(num_hidden_layers=n_layers)
    )
    skip = frozenset(int(i) for i in tq.config_cls.get_boundary_skip_layers(model_config))
    out = []
    for name in tq.presets:
        cfg = tq.config_cls.from_cache_dtype(name, head_dim)
        cen = tq.get_centroids(head_dim, cfg.centroid_bits).float()
        rt = tq_roundtrip(cfg, cen)
        out.append(Codec(name, "turboquant", "all", 1, cfg.slot_size_aligned, rt))
        if skip:
            out.append(
                Codec(f"{name}+skip", "turboquant", "all", 1, cfg.slot_size_aligned, rt, skip)
            )
    return out


# -- fp8 e4m3, as vLLM 0.29.0 stores it --------------------------------------------------------------

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


def fp8_store(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """x / scale as e4m3 codes. vLLM's stores (the CUDA ``reshape_and_cache_flash`` and its Triton twin)
    convert with saturation (cvt ... satfinite); the clamp says so here rather than leaving it to
    torch's cast beyond the range (torch 2.13 on the CPU saturates too; not relied on). Round to
    nearest even, as both do."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def fp8_load(codes: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """What attention reads: code * scale (vLLM's kernels fold the scale into q·k and p·v in fp32)."""
    return (codes.float() * scale).half()


@dataclass(frozen=True)
class Fp8Calibration:
    """Per layer, the largest |K| and |V| of each KV head over calibration text: k_amax[layer] and
    v_amax[layer] are [Hkv] fp32 tensors (CPU)."""

    k_amax: tuple[torch.Tensor, ...]
    v_amax: tuple[torch.Tensor, ...]
    windows: int  # how many windows of text it was taken over

    def scales(self, layer: int, per_head: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """amax / 448 (llm-compressor's static fp8 KV scale), per tensor or per KV head; the
        returned tensors broadcast over [B, Hkv, T, D]."""
        if not 0 <= layer < len(self.k_amax):
            raise ValueError(f"fp8 calibration has {len(self.k_amax)} layers; layer {layer} asked")
        k, v = self.k_amax[layer], self.v_amax[layer]
        if not per_head:
            k, v = k.amax(), v.amax()
            return k / FP8_MAX, v / FP8_MAX
        return (k / FP8_MAX).view(1, -1, 1, 1), (v / FP8_MAX).view(1, -1, 1, 1)


def fp8_calibrate(qkv: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> Fp8Calibration:
    """The amax of K and V per layer and KV head from captured (q, k, v) [B, H, T, D] per layer. A
    head whose values are all 0 would get scale 0 (0/0 on load): refused, naming layer and head."""
    ks, vs = [], []
    for layer, (_, k, v) in enumerate(qkv):
        for name, x, out in (("K", k, ks), ("V", v, vs)):
            amax = x.float().abs().amax(dim=(0, 2, 3)).cpu()
            if not bool(torch.isfinite(amax).all()) or bool((amax <= 0).any()):
                raise ValueError(
                    f"fp8 calibration: layer {layer} {name} amax per head {amax.tolist()} "
                    "(needs finite and > 0 on every head)"
                )
            out.append(amax)
    n = qkv[0][1].shape[0] if qkv else 0
    return Fp8Calibration(tuple(ks), tuple(vs), n)


def fp8_roundtrip(k_scale: torch.Tensor | float, v_scale: torch.Tensor | float) -> Roundtrip:
    def roundtrip(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ks = k_scale.to(k.device) if isinstance(k_scale, torch.Tensor) else k_scale
        vs = v_scale.to(v.device) if isinstance(v_scale, torch.Tensor) else v_scale
        return fp8_load(fp8_store(k, ks), ks), fp8_load(fp8_store(v, vs), vs)

    return roundtrip


def fp8_per_token_head_roundtrip(
    k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM 0.29.0's ``fp8_per_token_head`` cache dtype (``_reshape_cache_per_token_head``): one fp32
    scale per token and KV head, max(amax / 448, 1e-6), the codes x * (1 / scale) clamped to +-448."""

    def one(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        scale = (xf.abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(1e-6)
        return fp8_load(fp8_store(xf * (1.0 / scale), 1.0), scale)

    return one(k), one(v)


def fp8_codecs(head_dim: int, calib: Fp8Calibration | None) -> list[Codec]:
    """fp8 e4m3 KV on every token (vLLM writes each token before its decode attention reads it):

    - ``fp8_e4m3``: scale 1.0 for K and V, which is what vLLM 0.29.0 uses for ``--kv-cache-dtype
      fp8`` when the checkpoint carries no k_scale/v_scale (``BaseKVCacheMethod.
      process_weights_after_loading``: both at their -1.0 sentinel -> 1.0); 0.29.0 has no
      runtime-calculated scales (the calculate_kv_scales path is gone; its K/V_SCALE_CONSTANT
      variables are read by nothing);
    - ``fp8_e4m3_amax``: one scale for K and one for V per layer, amax / 448 over calibration text
      (what an fp8 checkpoint made by llm-compressor carries: per-tensor);
    - ``fp8_e4m3_head``: one per layer and KV head (compressed-tensors' ``attn_head`` strategy);
    - ``fp8_per_token_head``: vLLM's dynamic per-token, per-head cache dtype (+8 B of fp32 scales).

    Bytes per token per layer and KV head: 2 * D codes (the per-tensor and per-head scales are per
    layer, not per token)."""
    codes = 2.0 * head_dim
    out = [Codec("fp8_e4m3", "fp8", "all", 1, codes, fp8_roundtrip(1.0, 1.0))]
    if calib is not None:
        for name, per_head in (("fp8_e4m3_amax", False), ("fp8_e4m3_head", True)):
            out.append(
                Codec(name, "fp8", "all", 1, codes, None, by_layer=_calibrated(calib, per_head))
            )
    out.append(
        Codec("fp8_per_token_head", "fp8", "all", 1, codes + 8, fp8_per_token_head_roundtrip)
    )
    return out


def _calibrated(calib: Fp8Calibration, per_head: bool) -> Callable[[int], Roundtrip]:
    return lambda layer: fp8_roundtrip(*calib.scales(layer, per_head))
