"""kvarn-0.29.0.patch inside vLLM 0.29.0: cache dtypes, backend registry, KV-cache spec, layout, knobs.

Everything here imports the patched vLLM (see conftest.py) and runs on the CPU.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from kvarn_backend_trees import PATCHED_ROOT, PRISTINE_VLLM
from vllm.config.cache import CacheConfig, CacheDType
from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
from vllm.v1.attention.backends import kvarn_attn
from vllm.v1.attention.backends.kvarn_attn import KVarNAttentionBackend, fold_records
from vllm.v1.attention.backends.registry import AttentionBackendEnum
from vllm.v1.attention.ops.kvarn.config import KNOBS
from vllm.v1.attention.ops.kvarn.layout import PRESETS, record_layout
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheLayout,
    KVCacheTensor,
    KVQuantMode,
    create_kv_cache_views,
    get_kv_quant_mode,
    is_quantized_kv_cache,
)

PRESET_NAMES = ["kvarn_k4v2_g128", "kvarn_k4v4_g128", "kvarn_k4v2_g64", "kvarn_k4v4_g64"]


def test_the_patched_tree_is_the_one_imported():
    import vllm

    assert Path(vllm.__file__).resolve().is_relative_to(PATCHED_ROOT.resolve())


# -- cache dtypes --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_presets_are_accepted_cache_dtypes(name):
    assert name in typing.get_args(CacheDType)
    assert CacheConfig(cache_dtype=name).cache_dtype == name
    assert STR_DTYPE_TO_TORCH_DTYPE[name] is torch.uint8
    assert get_kv_quant_mode(name) is KVQuantMode.KVARN
    assert KVQuantMode.KVARN.is_kvarn and is_quantized_kv_cache(name)


def test_exactly_the_four_presets_and_nothing_else_is_kvarn():
    names = [a for a in typing.get_args(CacheDType) if a.startswith("kvarn")]
    assert sorted(names) == sorted(PRESET_NAMES) == sorted(PRESETS)
    assert not any(m.is_kvarn for m in KVQuantMode if m is not KVQuantMode.KVARN)
    with pytest.raises(ValueError):
        CacheConfig(cache_dtype="kvarn_k2v2_g128")


# -- registry ------------------------------------------------------------------------------------


def test_backend_is_registered():
    assert AttentionBackendEnum.KVARN.get_class() is KVarNAttentionBackend
    assert KVarNAttentionBackend.get_name() == "KVARN"
    assert AttentionBackendEnum["KVARN"].get_path() == (
        "vllm.v1.attention.backends.kvarn_attn.KVarNAttentionBackend"
    )


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_backend_accepts_kvarn_dtypes(name):
    assert KVarNAttentionBackend.supports_kv_cache_dtype(name)


@pytest.mark.parametrize(
    "other", ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "turboquant_k8v4", "nvfp4", None]
)
def test_backend_refuses_other_dtypes(other):
    assert not KVarNAttentionBackend.supports_kv_cache_dtype(other)


def _reasons(backend, *, kv_cache_dtype, head_size=128, dtype=torch.float16, block_size=None):
    from vllm.platforms.interface import DeviceCapability

    return backend.validate_configuration(
        head_size=head_size,
        dtype=dtype,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        use_mla=False,
        has_sink=False,
        use_sparse=False,
        use_mm_prefix=False,
        use_per_head_quant_scales=False,
        device_capability=DeviceCapability(9, 0),
        attn_type="decoder",
    )


def test_backend_capabilities():
    b = KVarNAttentionBackend
    assert b.get_supported_head_sizes() == [128, 256]
    assert not b.supports_sliding_window() and not b.is_mla() and not b.supports_kv_connector()
    assert not b.supports_device_cpu_query_lens_mismatch()
    assert b.supports_attn_type("decoder") and not b.supports_attn_type("encoder_only")
    assert b.forward_includes_kv_cache_update and b.accept_output_buffer


def test_validate_configuration():
    assert _reasons(KVarNAttentionBackend, kv_cache_dtype="kvarn_k4v2_g128") == []
    assert _reasons(KVarNAttentionBackend, kv_cache_dtype="kvarn_k4v2_g64", head_size=256) == []
    assert "kv_cache_dtype not supported" in _reasons(KVarNAttentionBackend, kv_cache_dtype="fp8")
    assert "head_size not supported" in _reasons(
        KVarNAttentionBackend, kv_cache_dtype="kvarn_k4v2_g128", head_size=96
    )


@pytest.mark.parametrize("enum_name", ["FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"])
def test_the_other_cuda_backends_refuse_kvarn(enum_name):
    """KVARN is last in the priority lists: that is only right if nobody before it takes kvarn_*."""
    other = AttentionBackendEnum[enum_name].get_class()
    assert "kv_cache_dtype not supported" in _reasons(other, kv_cache_dtype="kvarn_k4v2_g128")


@pytest.fixture
def cuda_platform(monkeypatch):
    """vllm.platforms.cuda imports vllm._C_stable_libtorch, which needs libcuda.so.1: a stand-in
    module replaces that binary only (no GPU here); everything else is the patched source."""
    monkeypatch.setitem(sys.modules, "vllm._C_stable_libtorch", types.ModuleType("stub"))
    import vllm.platforms.cuda as cuda

    return cuda


@pytest.mark.parametrize("major", [8, 9, 10, 12])
def test_kvarn_in_the_cuda_priority_lists(cuda_platform, major):
    from vllm.platforms.interface import DeviceCapability

    prio = cuda_platform._get_backend_priorities.__wrapped__(
        False, DeviceCapability(major, 0), None, "kvarn_k4v2_g128", False
    )
    assert prio[-1] is AttentionBackendEnum.KVARN
    assert prio.count(AttentionBackendEnum.KVARN) == 1


# Backends whose module cannot be imported without a GPU (they query the device at import time).
# FlashInfer refuses kvarn_* by its supported_kv_cache_dtypes list (auto, float16, bfloat16, fp8*, nvfp4*).
NEEDS_A_GPU_TO_IMPORT = {"FLASHINFER"}


@pytest.mark.parametrize("major", [9, 10])
@pytest.mark.parametrize("head_size", [128, 256])
def test_cuda_candidates_map_kvarn_dtypes_to_kvarn_only(cuda_platform, major, head_size):
    """Every backend of the CUDA priority list validated as the platform does (get_valid_backends,
    minus the modules that need a GPU to import): for kvarn_* only KVARN is valid; for fp8 KVARN is not."""
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.selector import AttentionSelectorConfig

    cap = DeviceCapability(major, 0)

    def valid_for(kv_cache_dtype: str) -> list[str]:
        cfg = AttentionSelectorConfig(
            head_size=head_size,
            dtype=torch.bfloat16,
            kv_cache_dtype=kv_cache_dtype,
            block_size=None,
        )
        prio = cuda_platform._get_backend_priorities.__wrapped__(False, cap, None, kv_cache_dtype)
        valid, skipped = [], set()
        for backend in prio:
            if backend.name in NEEDS_A_GPU_TO_IMPORT:
                skipped.add(backend.name)
                continue
            cls = backend.get_class()
            if not cls.validate_configuration(device_capability=cap, **cfg._asdict()):
                valid.append(backend.name)
        assert skipped == NEEDS_A_GPU_TO_IMPORT
        return valid

    for name in PRESET_NAMES:
        assert valid_for(name) == ["KVARN"]
    assert "KVARN" not in valid_for("fp8") and valid_for("fp8")


def test_cuda_check_and_update_config_runs_the_kvarn_check(cuda_platform):
    cache = CacheConfig(cache_dtype="kvarn_k4v2_g128", enable_prefix_caching=True)
    cfg = SimpleNamespace(
        parallel_config=SimpleNamespace(worker_cls="auto"),
        model_config=None,
        cache_config=cache,
        scheduler_config=SimpleNamespace(),
        offload_config=SimpleNamespace(uva=SimpleNamespace(cpu_offload_gb=0)),
        compilation_config=SimpleNamespace(cudagraph_mode=0),
        speculative_config=None,
    )
    cuda_platform.CudaPlatformBase.check_and_update_config(cfg)
    assert cache.enable_prefix_caching is False
    # The speculative config reaches the check too.
    with pytest.raises(ValueError, match="'mtp'"):
        cuda_platform.CudaPlatformBase.check_and_update_config(
            SimpleNamespace(**{**vars(cfg), "speculative_config": _spec("mtp")})
        )
    # The same path on a pristine dtype leaves prefix caching alone.
    fp16 = CacheConfig(cache_dtype="auto", enable_prefix_caching=True)
    cuda_platform.CudaPlatformBase.check_and_update_config(
        SimpleNamespace(**{**vars(cfg), "cache_config": fp16})
    )
    assert fp16.enable_prefix_caching is True


def _spec(method: str):
    """A SpeculativeConfig's method and the two predicates the check reads, without building a
    drafter (that needs a model); the predicates are the real ones, bound to the stand-in."""
    from vllm.config.speculative import SpeculativeConfig

    ns = SimpleNamespace(method=method)
    ns.use_eagle = SpeculativeConfig.use_eagle.__get__(ns)
    ns.uses_draft_model = SpeculativeConfig.uses_draft_model.__get__(ns)
    return ns


@pytest.mark.parametrize("method", ["eagle", "eagle3", "mtp", "draft_model"])
def test_drafters_with_attention_are_refused(method):
    with pytest.raises(ValueError, match=f"method '{method}'"):
        kvarn_attn.check_kvarn_config(
            CacheConfig(cache_dtype="kvarn_k4v2_g128"), None, _spec(method)
        )


@pytest.mark.parametrize("method", ["ngram", "suffix", "medusa", "mlp_speculator"])
def test_drafters_without_attention_are_accepted(method):
    kvarn_attn.check_kvarn_config(CacheConfig(cache_dtype="kvarn_k4v2_g128"), None, _spec(method))


def test_check_kvarn_config_refusals():
    def model(head):
        return SimpleNamespace(get_head_size=lambda: head, use_mla=False)

    kvarn_attn.check_kvarn_config(CacheConfig(cache_dtype="kvarn_k4v2_g128"), model(256))
    with pytest.raises(ValueError, match="head size is 96"):
        kvarn_attn.check_kvarn_config(CacheConfig(cache_dtype="kvarn_k4v2_g128"), model(96))
    with pytest.raises(ValueError, match="--block-size 64 is not a multiple of 128"):
        kvarn_attn.check_kvarn_config(
            CacheConfig(cache_dtype="kvarn_k4v2_g128", block_size=64), model(128)
        )
    kvarn_attn.check_kvarn_config(CacheConfig(cache_dtype="kvarn_k4v2_g64", block_size=64), None)


# -- the KV-cache spec ---------------------------------------------------------------------------


def _layer_spec(cache_dtype: str, head_size: int, num_kv_heads: int, block_size: int):
    """The patched Attention.get_kv_cache_spec, run on a stand-in layer (building a real layer
    needs a model and a device; the method only reads these attributes)."""
    from vllm.model_executor.layers.attention.attention import Attention

    layer = SimpleNamespace(
        attn_type="decoder",
        kv_cache_dtype=cache_dtype,
        sliding_window=None,
        num_kv_heads=num_kv_heads,
        head_size=head_size,
        head_size_v=head_size,
        kv_cache_torch_dtype=STR_DTYPE_TO_TORCH_DTYPE[cache_dtype],
        attn_backend=KVarNAttentionBackend,
    )
    cfg = SimpleNamespace(cache_config=SimpleNamespace(block_size=block_size))
    return Attention.get_kv_cache_spec(layer, cfg)


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("head_size", [128, 256])
def test_page_is_heads_times_record(name, head_size):
    heads = 4
    g = PRESETS[name].group
    spec = _layer_spec(name, head_size, heads, g)
    rec = record_layout(name, head_size).size
    assert isinstance(spec, FullAttentionSpec)
    assert spec.kv_quant_mode is KVQuantMode.KVARN
    assert spec.state_content_bytes * g == rec
    assert spec.page_size_bytes == heads * rec
    # A manager block of k tiles is k pages of records.
    assert _layer_spec(name, head_size, heads, 3 * g).page_size_bytes == 3 * heads * rec
    # customize_spec leaves the layer's spec as it is.
    assert KVarNAttentionBackend.customize_spec(spec) == spec


def test_record_sizes_of_the_spec():
    assert _layer_spec("kvarn_k4v2_g128", 128, 1, 128).page_size_bytes == 13_824
    assert _layer_spec("kvarn_k4v2_g128", 256, 4, 128).page_size_bytes == 4 * 26_880


def test_customize_spec_fills_a_bare_kvarn_spec_from_the_current_config():
    from vllm.config import VllmConfig, set_current_vllm_config

    bare = FullAttentionSpec(
        block_size=1,
        num_kv_heads=4,
        head_size=256,
        dtype=torch.uint8,
        kv_quant_mode=KVQuantMode.KVARN,
    )
    cfg = VllmConfig(cache_config=CacheConfig(cache_dtype="kvarn_k4v2_g64"))
    with set_current_vllm_config(cfg):
        spec = KVarNAttentionBackend.customize_spec(bare)
        assert KVarNAttentionBackend.get_supported_kernel_block_sizes() == [64]
    assert spec.page_size_bytes == 4 * record_layout("kvarn_k4v2_g64", 256).size // 64


def test_hybrid_alignment_uses_the_kvarn_page(monkeypatch):
    """A hybrid (linear attention + KVarN) model: the platform sizes the attention block so its page
    covers the mamba state, in whole tiles, and pads the mamba page to exactly the KVarN page. The
    model class is a stand-in (no model can be loaded here): it only reports its state shapes."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform

    class HybridModel:
        @staticmethod
        def get_mamba_state_shape_from_config(cfg):
            return ((4, 3, 2048), (16, 128, 128))

        @staticmethod
        def get_mamba_state_dtype_from_config(cfg):
            return (torch.bfloat16, torch.float32)

    monkeypatch.setattr(
        ModelRegistry, "resolve_model_cls", lambda arch, model_config=None: (HybridModel, arch)
    )
    mamba_page = 4 * 3 * 2048 * 2 + 16 * 128 * 128 * 4
    cache = CacheConfig(cache_dtype="kvarn_k4v2_g128", block_size=128)
    model = SimpleNamespace(
        use_mla=False,
        dtype=torch.bfloat16,
        architecture="HybridModel",
        get_num_kv_heads=lambda parallel: 4,
        get_head_size=lambda: 256,
        get_mamba_chunk_size=lambda: 64,
    )
    Platform._align_hybrid_block_size(
        SimpleNamespace(cache_config=cache, model_config=model, parallel_config=None),
        KVarNAttentionBackend,
    )
    page_per_tile = 4 * 26_880
    tiles = -(-mamba_page // page_per_tile)
    assert cache.block_size == 128 * tiles
    assert cache.mamba_page_size_padded == tiles * page_per_tile


# -- layout and the record fold -------------------------------------------------------------------


def test_declared_layout_is_the_contiguous_one():
    assert KVarNAttentionBackend.supported_kv_cache_layouts() == (KVCacheLayout.LBHNC,)
    assert KVCacheLayout.LBHNC.is_block_contiguous


def test_the_engine_resolves_lbhnc_beside_a_linear_attention_backend(monkeypatch):
    """A hybrid model (GDN linear attention + KVarN full attention): the engine core's resolution
    lands on LBHNC, and a user's VLLM_KV_CACHE_LAYOUT=LBNHC is refused there, before any fold."""
    import vllm.envs as envs
    from vllm.config import VllmConfig
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )

    gdn = MambaAttentionBackendEnum.GDN_ATTN.get_class()
    names = [m.name for m in get_supported_kv_cache_layouts([gdn, KVarNAttentionBackend])]
    assert names == ["LBHNC"]
    monkeypatch.delenv("VLLM_KV_CACHE_LAYOUT", raising=False)
    envs.disable_envs_cache()
    cfg = VllmConfig(cache_config=CacheConfig(cache_dtype="kvarn_k4v2_g128"))
    assert resolve_kv_cache_layout(cfg, [names]) is KVCacheLayout.LBHNC
    monkeypatch.setenv("VLLM_KV_CACHE_LAYOUT", "LBNHC")
    cfg = VllmConfig(cache_config=CacheConfig(cache_dtype="kvarn_k4v2_g128"))
    with pytest.raises(ValueError, match="LBHNC"):
        resolve_kv_cache_layout(cfg, [names])


def _views(layout: KVCacheLayout, name: str, head_size: int, heads: int, nblocks: int, kbs=None):
    g = PRESETS[name].group
    spec = _layer_spec(name, head_size, heads, g if kbs is None else 2 * g)
    page = spec.page_size_bytes
    raw = torch.arange(page * nblocks, dtype=torch.int64).remainder(251).to(torch.int8)
    tensor = KVCacheTensor(
        size=page * nblocks, layers=["l0"], layer_stride=page * nblocks, block_stride=page
    )
    (view,) = create_kv_cache_views(raw, spec, nblocks, layout, tensor, kernel_block_size=kbs)
    return raw, view


@pytest.mark.parametrize("head_size", [128, 256])
def test_fold_under_lbhnc_is_one_contiguous_record_per_block_and_head(head_size):
    name, heads, nblocks = "kvarn_k4v2_g128", 4, 3
    rec = record_layout(name, head_size).size
    raw, view = _views(KVCacheLayout.LBHNC, name, head_size, heads, nblocks)
    folded = fold_records(view, rec)
    assert folded.shape == (nblocks, heads, rec) and folded.dtype == torch.uint8
    assert folded.is_contiguous() and folded.data_ptr() == view.data_ptr()
    flat = raw.view(torch.uint8)
    for b in range(nblocks):
        for h in range(heads):
            start = (b * heads + h) * rec
            assert torch.equal(folded[b, h], flat[start : start + rec])


def test_fold_under_lbhnc_with_kernel_block_splitting():
    """A manager block of 2 tiles: the runner hands the backend tile-sized kernel blocks."""
    name, head_size, heads = "kvarn_k4v2_g64", 128, 2
    rec = record_layout(name, head_size).size
    _raw, view = _views(KVCacheLayout.LBHNC, name, head_size, heads, 3, kbs=64)
    assert fold_records(view, rec).shape == (6, heads, rec)


def test_fold_fails_loudly_on_lbnhc():
    name, head_size, heads = "kvarn_k4v2_g128", 128, 4
    rec = record_layout(name, head_size).size
    _raw, view = _views(KVCacheLayout.LBNHC, name, head_size, heads, 2)
    with pytest.raises(ValueError, match="LBHNC"):
        fold_records(view, rec)


def test_fold_refuses_a_wrong_record_size():
    _raw, view = _views(KVCacheLayout.LBHNC, "kvarn_k4v2_g128", 128, 2, 2)
    with pytest.raises(ValueError, match="tile size G"):
        fold_records(view, record_layout("kvarn_k4v4_g128", 128).size)


# -- knobs ---------------------------------------------------------------------------------------


@pytest.fixture
def envs(monkeypatch):
    import vllm.envs as envs

    for name in KNOBS:
        monkeypatch.delenv(name, raising=False)
    envs.disable_envs_cache()
    return envs


def test_every_knob_is_registered_with_a_default_that_does_not_raise(envs):
    from vllm.v1.attention.ops.kvarn.config import KVarNConfig

    defaults = KVarNConfig()
    expected = {
        "KVARN_SINKHORN_ITERS": defaults.sinkhorn_iters,
        "KVARN_SPLIT_K": defaults.split_k,
        "KVARN_NUM_SPLITS": defaults.num_splits,
        "KVARN_MAX_SPLITS": defaults.max_splits,
        "KVARN_FUSED_DECODE": defaults.fused_decode,
    }
    assert set(expected) == set(KNOBS)
    for name, value in expected.items():
        assert name in envs.environment_variables
        assert getattr(envs, name) == value, name


def test_knobs_are_annotated_in_the_type_checking_block():
    tree = ast.parse((PATCHED_ROOT / "vllm/envs.py").read_text())
    block = next(
        n
        for n in tree.body
        if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"
    )
    annotated = {n.target.id for n in block.body if isinstance(n, ast.AnnAssign)}
    assert set(KNOBS) <= annotated


def test_knobs_are_compile_factors(envs, monkeypatch):
    factors = envs.compile_factors()
    for name in KNOBS:
        assert name in factors, f"{name} is missing from the torch.compile cache key"
    monkeypatch.setenv("KVARN_SINKHORN_ITERS", "3")
    monkeypatch.setenv("KVARN_FUSED_DECODE", "0")
    changed = envs.compile_factors()
    assert changed["KVARN_SINKHORN_ITERS"] != factors["KVARN_SINKHORN_ITERS"]
    assert changed["KVARN_FUSED_DECODE"] != factors["KVARN_FUSED_DECODE"]


def test_registry_grows_by_exactly_the_knobs(envs):
    spec = importlib.util.spec_from_file_location("pristine_vllm_envs", PRISTINE_VLLM / "envs.py")
    pristine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pristine)
    added = set(envs.environment_variables) - set(pristine.environment_variables)
    removed = set(pristine.environment_variables) - set(envs.environment_variables)
    assert added == set(KNOBS) and not removed
    assert len(envs.environment_variables) - len(pristine.environment_variables) == len(KNOBS)
