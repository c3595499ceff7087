# SPDX-License-Identifier: Apache-2.0
"""KVarN attention backend for vLLM 0.29.0 (``--kv-cache-dtype kvarn_k4v2_g128`` and the other presets).

What lives where (one layer, one KV-cache group):

- the KV cache: one packed record per (kernel block, KV head), ``[num_blocks, Hkv, record]`` bytes,
  folded from the runner's 4-D byte view ``[B, H, N, C]`` (C = record / G bytes per token). Under the
  layout this backend declares (LBHNC: block, head, token, content) a (block, head) record is one
  contiguous run; under LBNHC the tokens of a head are interleaved with the other heads' and the fold
  (a ``view``) fails loudly instead of reading garbage;
- an fp16 pool per layer, ``[slots, G, Hkv, D]`` for K and V (rotated), holding block 0 of every
  request (the sink, fp16 for the request's lifetime) and every block that still has uncommitted
  tokens; it is allocated during ``profile_run`` so the memory profiler charges it;
- which block holds which slot, and what to flush: ``kvarn_pool.KVarNSlotTable``, one per KV-cache
  group, owned by the metadata builder and planned once per step (device tensors, no host sync).

Per step and layer, ``forward``: compress the blocks the plan flushes (all their tokens committed),
write this step's K/V rotated into the pool, then attend: a request's first prefill chunk on the raw
K/V, everything else through the two-tier cache (the fused decode for single-token queries; on CUDA
the fused multi-token kernel, ``ops/kvarn/triton_prefix.py``, for chunk continuations and speculative
verification; on the CPU the torch reference, unless ``KVarNAttentionImpl.kernels`` asks for the
kernels in Triton's interpreter). Limits are listed in kvarn/README.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
import vllm.envs as envs
from vllm.config import get_current_vllm_config
from vllm.logger import init_logger
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionLayer,
    AttentionMetadata,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.kvarn_pool import KVarNSlotTable, SlotPlan, pool_slots_needed
from vllm.v1.attention.ops.kvarn.config import KNOBS, KVarNConfig
from vllm.v1.attention.ops.kvarn.layout import (
    PRESETS,
    SUPPORTED_HEAD_DIMS,
    KVarNLayoutError,
    RecordLayout,
    get_preset,
    record_layout,
)
from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheLayout

if TYPE_CHECKING:
    from vllm.config.cache import CacheConfig, CacheDType
    from vllm.config.model import ModelConfig

logger = init_logger(__name__)

KVARN_PREFIX = "kvarn_"
KVARN_CACHE_DTYPES: tuple[str, ...] = tuple(PRESETS)


def is_kvarn_cache_dtype(cache_dtype: object) -> bool:
    return isinstance(cache_dtype, str) and cache_dtype.startswith(KVARN_PREFIX)


def kvarn_state_content_bytes(cache_dtype: str, head_size: int) -> int:
    """Bytes one token owns in a page: record / G (records are padded to a multiple of lcm(8, G))."""
    layout = record_layout(cache_dtype, head_size)
    assert layout.size % layout.group == 0
    return layout.size // layout.group


def _current_cache_dtype() -> str | None:
    try:
        return get_current_vllm_config().cache_config.cache_dtype
    except Exception:  # no current config (e.g. a bare class-level query)
        return None


def check_kvarn_config(
    cache_config: CacheConfig, model_config: ModelConfig | None, speculative_config: Any = None
) -> None:
    """Startup checks for kvarn_* (called from the CUDA platform's check_and_update_config).

    Raises ValueError naming the preset and the offending value; turns prefix caching off with a
    warning (block 0 and unflushed tails live in a per-layer fp16 pool keyed by block id, which a
    prefix-cache hit from another request cannot see).

    Speculative decoding whose drafter has attention layers of its own (EAGLE, MTP, a draft model) is
    refused: Model Runner V2 builds the drafter's attention metadata with builders of its own, so
    its layers would be planned by a second slot table, and its prefill step reuses the target's,
    mixing the two. Drafters without attention (n-gram, suffix, Medusa, MLP) are fine: the target's
    verify steps are covered (rejected drafts never reach the compressed cache).
    """
    cache_dtype = cache_config.cache_dtype
    try:
        preset = get_preset(cache_dtype)
    except KVarNLayoutError as e:
        raise ValueError(str(e)) from None
    if model_config is not None:
        head_size = model_config.get_head_size()
        if head_size not in SUPPORTED_HEAD_DIMS:
            raise ValueError(
                f"--kv-cache-dtype {cache_dtype}: the model's head size is {head_size}; KVarN "
                f"supports head sizes {list(SUPPORTED_HEAD_DIMS)} (pick another --kv-cache-dtype)"
            )
        if getattr(model_config, "use_mla", False):
            raise ValueError(f"--kv-cache-dtype {cache_dtype}: KVarN does not support MLA models")
    if cache_config.user_specified_block_size and cache_config.block_size % preset.group:
        raise ValueError(
            f"--kv-cache-dtype {cache_dtype} compresses tiles of {preset.group} tokens; "
            f"--block-size {cache_config.block_size} is not a multiple of {preset.group}"
        )
    if speculative_config is not None and _drafter_has_attention(speculative_config):
        raise ValueError(
            f"--kv-cache-dtype {cache_dtype}: KVarN does not support speculative decoding with "
            f"method {speculative_config.method!r} yet (its drafter has attention layers of its own); "
            "use an n-gram or suffix drafter, or another --kv-cache-dtype"
        )
    if cache_config.enable_prefix_caching:
        logger.warning(
            "KVarN (%s): disabling prefix caching; the fp16 sink block and unflushed tails "
            "are kept per block id and cannot be shared between requests.",
            cache_dtype,
        )
        cache_config.enable_prefix_caching = False


def _drafter_has_attention(speculative_config: Any) -> bool:
    uses_eagle = getattr(speculative_config, "use_eagle", None)
    uses_draft = getattr(speculative_config, "uses_draft_model", None)
    return bool((uses_eagle and uses_eagle()) or (uses_draft and uses_draft()))


def fold_records(kv_cache: torch.Tensor, record_size: int) -> torch.Tensor:
    """The runner's per-layer byte view [B, H, N, C] -> one record per (block, head): [B, H, N·C].

    A ``view``, never a copy: it succeeds only when each head's N·C bytes are contiguous, i.e. under
    LBHNC. Under LBNHC (tokens outer, heads inner) a record would be strided across the other heads
    and the view raises; this turns that into an error naming the layout to use.
    """
    if kv_cache.dim() != 4:
        raise ValueError(
            f"KVarN expects the runner's 4-D per-layer KV cache view [blocks, heads, tokens, bytes], "
            f"got shape {tuple(kv_cache.shape)}"
        )
    b, h, n, c = kv_cache.shape
    if n * c != record_size:
        raise ValueError(
            f"KVarN: a (block, head) page holds {n} tokens x {c} bytes = {n * c} bytes, the record is "
            f"{record_size} bytes (kernel block size must equal the tile size G)"
        )
    try:
        return kv_cache.view(b, h, n * c)
    except RuntimeError as e:
        raise ValueError(
            "KVarN needs each (block, KV head) record contiguous: KV cache layout LBHNC "
            f"(got strides {tuple(kv_cache.stride())} for shape {tuple(kv_cache.shape)}; "
            "unset VLLM_KV_CACHE_LAYOUT or set it to LBHNC)"
        ) from e


class KVarNAttentionBackend(AttentionBackend):
    """KVarN: Hadamard rotation + two-axis variance normalization + 4/2-bit RTN, per block and head."""

    accept_output_buffer: bool = True
    # forward() flushes, writes the pool and attends, in that order, in one custom op.
    forward_includes_kv_cache_update: bool = True

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[CacheDType]] = list(KVARN_CACHE_DTYPES)  # type: ignore[assignment]

    @staticmethod
    def get_name() -> str:
        return "KVARN"

    @staticmethod
    def get_impl_cls() -> type[KVarNAttentionImpl]:
        return KVarNAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[KVarNMetadataBuilder]:
        return KVarNMetadataBuilder

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # LBHNC keeps each head's G tokens (one record) together; LBNHC interleaves heads per token.
        return (KVCacheLayout.LBHNC,)

    @staticmethod
    def get_supported_kernel_block_sizes() -> list[int]:
        # The kernel block is the tile: exactly G tokens of the configured preset. Without a
        # current config (class-level queries) both tile sizes are offered, the larger first.
        cache_dtype = _current_cache_dtype()
        if is_kvarn_cache_dtype(cache_dtype) and cache_dtype in PRESETS:
            return [PRESETS[cache_dtype].group]
        return sorted({p.group for p in PRESETS.values()}, reverse=True)

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(SUPPORTED_HEAD_DIMS)

    @classmethod
    def supports_kv_cache_dtype(cls, kv_cache_dtype: CacheDType | None) -> bool:
        return kv_cache_dtype in KVARN_CACHE_DTYPES

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    @classmethod
    def supports_device_cpu_query_lens_mismatch(cls) -> bool:
        # forward() slices requests with the host query_start_loc; adaptive verification trims
        # drafts on the device only, which would misalign them.
        return False

    @classmethod
    def supports_kv_connector(cls) -> bool:
        # A connector would move the records but not the fp16 pool holding sinks and tails.
        return False

    @classmethod
    def kernel_block_size_for(cls, cache_dtype: str) -> int:
        """Model Runner V2 (kvarn-v2-runner row) forces the kernel block of a KVarN group to G."""
        return get_preset(cache_dtype).group

    @classmethod
    def customize_spec(cls, spec: AttentionSpec) -> AttentionSpec:
        """Per-token state bytes = record / G, so a page of G tokens is heads x record.

        The attention layer already sets it (it knows the cache dtype); this covers specs built
        elsewhere (hybrid page alignment) from the current config.
        """
        if spec.state_content_bytes is not None or not spec.kv_quant_mode.is_kvarn:
            return spec
        cache_dtype = _current_cache_dtype()
        if not is_kvarn_cache_dtype(cache_dtype):
            raise ValueError(
                "KVarN KV-cache spec without a kvarn_* cache dtype in the current vLLM config"
            )
        return replace(
            spec, state_content_bytes=kvarn_state_content_bytes(cache_dtype, spec.head_size)
        )


def _knobs_from_vllm_envs() -> dict[str, str]:
    """The KVARN_* knobs as vllm.envs reads them (registered there, so they are in the compile key).

    Reading them through ``vllm.envs`` rather than ``os.environ`` keeps one source of truth with the
    torch.compile cache key; the config object then validates the values.
    """
    values: dict[str, str] = {}
    for name in KNOBS:
        value = getattr(envs, name)
        values[name] = str(int(value)) if isinstance(value, bool) else str(value)
    return values


@dataclass
class KVarNMetadata(AttentionMetadata):
    seq_lens: torch.Tensor  # [R] device, exact (this step's tokens included)
    query_start_loc: torch.Tensor  # [R + 1] device
    query_start_loc_cpu: torch.Tensor  # [R + 1] host
    seq_lens_cpu: torch.Tensor | None  # [R] host, an upper bound under async spec decode
    block_table: torch.Tensor  # [R, W] kernel-block ids
    slot_mapping: torch.Tensor  # [T] kernel-block slots (block · G + row), -1 = padding
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    plan: SlotPlan
    block_slot: torch.Tensor | None  # [num_blocks] pool slot of a block, -1 when compressed;
    # None before the KV cache exists (dummy runs during memory profiling)
    # [R] 1 + the leading compressed blocks after the sink, per request: what the decode kernel's
    # branch-free loop covers. Once a step from the plan's slot table (the same for every layer of
    # the group), not derived again by each layer's decode (several small torch ops a layer).
    comp_end: torch.Tensor | None = None
    # Every request has one query token (max_query_len == 1): forward takes the path with no host
    # read (ops/kvarn/step.py), the one a full CUDA graph captures. The plan's tensors it reads and
    # comp_end then live in the builder's persistent buffers (same memory every step).
    uniform_decode: bool = False
    # Every request has this many query tokens, 2..triton_prefix.FUSED_MAX_TOKENS (speculative
    # verification: 1 + k), else 0: forward takes ops/kvarn/step.verify_step, also with no host read.
    uniform_verify: int = 0


class KVarNMetadataBuilder(AttentionMetadataBuilder[KVarNMetadata]):
    """Builds the step's metadata and the pool plan; one slot table per KV-cache group."""

    # A step of single-token decodes, or of speculative verification (every request 1 + k tokens,
    # up to 16), runs with no host read, from buffers that keep their memory (the plan and comp_end
    # are copied into them), so vLLM may capture it in a full CUDA graph; other steps (prefill
    # chunks, mixed batches) run eagerly between piecewise graphs.
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.cache_dtype = vllm_config.cache_config.cache_dtype
        self.preset = get_preset(self.cache_dtype)
        if kv_cache_spec.block_size != self.preset.group:
            raise ValueError(
                f"{self.cache_dtype}: kernel block size {kv_cache_spec.block_size} != tile "
                f"{self.preset.group} (the kvarn-v2-runner row sets it; is it applied?)"
            )
        self.num_slots = kvarn_pool_slots(vllm_config, self.preset.group)
        self._table: KVarNSlotTable | None = None
        sched = vllm_config.scheduler_config
        self.max_tokens = max(sched.max_num_batched_tokens, sched.max_num_seqs)
        self.max_reqs = sched.max_num_seqs
        self._persistent: dict[str, torch.Tensor] = {}

    def _keep(self, name: str, value: torch.Tensor, size: int) -> torch.Tensor:
        """``value`` copied into a buffer that keeps its memory from step to step (what a captured
        graph reads), sized for the engine's largest step; a view of its first entries."""
        buf = self._persistent.get(name)
        n = value.shape[0]
        if buf is None or buf.shape[0] < n or buf.dtype != value.dtype:
            buf = torch.empty(max(size, n), dtype=value.dtype, device=value.device)
            self._persistent[name] = buf
        view = buf[:n]
        view.copy_(value, non_blocking=True)
        return view

    def _slot_table(self) -> KVarNSlotTable | None:
        """The group's table, sized by the layer's KV cache; None while no KV cache is bound (dummy
        and graph-memory runs before the KV cache exists build metadata too)."""
        ctx = self.vllm_config.compilation_config.static_forward_context
        kv_cache = getattr(ctx.get(self.layer_names[0]), "kv_cache", None)
        if not isinstance(kv_cache, torch.Tensor) or kv_cache.dim() != 4 or kv_cache.shape[0] == 0:
            return None
        num_blocks = int(kv_cache.shape[0])
        if self._table is None or self._table.num_blocks != num_blocks:
            self._table = KVarNSlotTable(num_blocks, self.num_slots, self.preset.group, self.device)
        return self._table

    def release_blocks(self, block_ids: torch.Tensor) -> None:
        """Called by Model Runner V2 for each finished or preempted request (kvarn-v2-runner)."""
        if self._table is not None:
            self._table.release(block_ids)

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> KVarNMetadata:
        cam = common_attn_metadata
        n = cam.num_actual_tokens
        table = self._slot_table()
        if table is None:
            plan, block_slot = _idle_plan(cam.slot_mapping[:n], self.device), None
        else:
            plan = table.plan(
                cam.block_table_tensor, cam.seq_lens, cam.query_start_loc, cam.slot_mapping[:n]
            )
            block_slot = table.decode_view
        comp_end = None
        if block_slot is not None:
            from vllm.v1.attention.ops.kvarn.triton_decode import compressed_end_from_slots

            comp_end = compressed_end_from_slots(
                block_slot, cam.block_table_tensor, cam.seq_lens, self.preset.group
            )
            comp_end = self._keep("comp_end", comp_end, self.max_reqs)
            plan = plan._replace(
                write_slots=self._keep("write_slots", plan.write_slots, self.max_tokens),
                write_rows=self._keep("write_rows", plan.write_rows, self.max_tokens),
                committed=self._keep("committed", plan.committed, self.max_reqs),
                flush_by_slot=self._keep("flush_by_slot", plan.flush_by_slot, self.num_slots),
            )
        return KVarNMetadata(
            seq_lens=cam.seq_lens,
            query_start_loc=cam.query_start_loc,
            query_start_loc_cpu=cam.query_start_loc_cpu,
            seq_lens_cpu=cam.seq_lens_cpu_upper_bound,
            block_table=cam.block_table_tensor,
            slot_mapping=cam.slot_mapping,
            num_actual_tokens=n,
            max_query_len=cam.max_query_len,
            max_seq_len=cam.max_seq_len,
            plan=plan,
            block_slot=block_slot,
            comp_end=comp_end,
            uniform_decode=cam.max_query_len == 1 and cam.num_reqs == n,
            uniform_verify=_uniform_verify(cam.max_query_len, cam.num_reqs, n),
        )


def _uniform_verify(max_query_len: int, num_reqs: int, num_tokens: int) -> int:
    """The query length every request has, when that is 2..FUSED_MAX_TOKENS (else 0): all have it
    when the tokens are num_reqs times the longest query."""
    from vllm.v1.attention.ops.kvarn.triton_prefix import FUSED_MAX_TOKENS

    q = max_query_len
    return q if 1 < q <= FUSED_MAX_TOKENS and num_reqs * q == num_tokens else 0


def _idle_plan(slot_mapping: torch.Tensor, device: torch.device) -> SlotPlan:
    """No KV cache yet: nothing to flush, nowhere to write (forward then only zeroes its output)."""
    none = torch.full((0,), -1, dtype=torch.int64, device=device)
    lanes = torch.full((slot_mapping.shape[0],), -1, dtype=torch.int64, device=device)
    return SlotPlan(none, none, lanes, torch.zeros_like(lanes), none, none.to(torch.int32))


_WORKSPACES: dict[torch.device, Any] = {}


def _shared_workspace(device: torch.device) -> Any:
    from vllm.v1.attention.ops.kvarn.triton_decode import DecodeWorkspace

    return _WORKSPACES.setdefault(device, DecodeWorkspace())


def kvarn_pool_slots(vllm_config: Any, group: int) -> int:
    """Pool slots per layer for this engine's limits (kvarn_pool.pool_slots_needed)."""
    sched = vllm_config.scheduler_config
    spec = vllm_config.speculative_config
    num_drafts = (getattr(spec, "num_speculative_tokens", None) or 0) if spec is not None else 0
    max_query_len = 1 + num_drafts  # a decode step: the sampled token and its drafts
    return pool_slots_needed(sched.max_num_seqs, sched.max_num_batched_tokens, group, max_query_len)


class KVarNAttentionImpl(AttentionImpl[KVarNMetadata]):
    supports_quant_query_input: bool = False

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        if alibi_slopes is not None or sliding_window is not None or logits_soft_cap:
            raise NotImplementedError(
                "KVarN: ALiBi, sliding window and soft-capping are not supported"
            )
        if kv_sharing_target_layer_name is not None:
            raise NotImplementedError("KVarN: cross-layer KV sharing is not supported")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.layout: RecordLayout = record_layout(kv_cache_dtype, head_size)
        self.group = self.layout.group
        self.config = KVarNConfig.from_env(_knobs_from_vllm_envs())
        vllm_config = get_current_vllm_config()
        self.num_slots = kvarn_pool_slots(vllm_config, self.group)
        self.pool_k: torch.Tensor | None = None
        self.pool_v: torch.Tensor | None = None
        self.h16: torch.Tensor | None = None
        self._workspace: Any = None  # split-K partials (CUDA), shared by all layers
        # The Triton kernels, or the torch reference: None = the kernels on CUDA. Tests set True on
        # the CPU to run the kernels in Triton's interpreter through this class.
        self.kernels: bool | None = None
        self.max_num_seqs = vllm_config.scheduler_config.max_num_seqs
        # The decode launch of a step of single-token decodes is fixed for the longest context
        # (ops/kvarn/step.fixed_launch); the kernel cuts its work from the device's lengths, so any
        # length is read right, this only picks the split count. No model config (unit tests): 1M.
        model_config = vllm_config.model_config
        self.max_model_len = (
            int(model_config.max_model_len) if model_config is not None else 1 << 20
        )
        self._launches: dict[int, tuple[int, int]] = {}  # batch -> (splits, warps), decode steps
        # (the runner's KV cache tensor of this layer, its folded records view): forward()
        self._records: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)

    # -- device state ---------------------------------------------------------------------------
    def _ensure_pool(self, device: torch.device) -> None:
        """Allocate the fp16 pool (and H) once. The first forward is profile_run's, so the memory
        profiler sees it as non-KV memory and the KV budget shrinks by exactly this much."""
        if self.pool_k is not None:
            return
        from vllm.v1.attention.ops.kvarn.hadamard import hadamard

        # One extra trailing slot takes the writes of padding tokens (never read).
        shape = (self.num_slots + 1, self.group, self.num_kv_heads, self.head_size)
        self.pool_k = torch.zeros(shape, dtype=torch.float16, device=device)
        self.pool_v = torch.zeros(shape, dtype=torch.float16, device=device)
        self.h16 = hadamard(self.head_size, dtype=torch.float16, device=device)
        if device.type == "cuda":
            # The split-K partials at their largest (the most batch x splits rows the launch
            # policy takes for up to max_num_seqs requests), made now so the profiler charges
            # them too; layers run one after another on one stream, so they share one buffer.
            from vllm.v1.attention.ops.kvarn.triton_decode import split_rows

            self._workspace = _shared_workspace(device)
            rows = split_rows(
                self.max_num_seqs, self.num_kv_heads, self.head_size, self.config, device
            )
            self._workspace.get(rows, self.num_heads, self.head_size, device)
        logger.info_once(
            "KVarN %s: fp16 pool of %d slots x %d tokens per layer (%.1f MiB per layer).",
            self.kv_cache_dtype,
            self.num_slots,
            self.group,
            2 * self.pool_k.numel() * 2 / (1 << 20),
        )

    def _kernels(self, t: torch.Tensor) -> bool:
        return t.is_cuda if self.kernels is None else self.kernels

    # -- the step --------------------------------------------------------------------------------
    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: KVarNMetadata | None,
        output: torch.Tensor | None = None,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        assert output is not None, "KVarN writes into the runner's output buffer"
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("KVarN: fused output quantization is not supported")
        self._ensure_pool(query.device)
        if attn_metadata is None or attn_metadata.block_slot is None:
            # profile_run, or a dummy run before the KV cache exists
            return output.fill_(0)
        assert self.pool_k is not None and self.pool_v is not None and self.h16 is not None
        # The runner passes the same per-layer tensor every step: its folded view is kept, so the
        # step's layer objects stay the same objects (step.decode_step's prepared launches, the
        # decode's bound launch, are known by identity) and no view is made per step.
        held, records = self._records
        if held is not kv_cache:
            records = fold_records(kv_cache, self.layout.size)
            self._records = (kv_cache, records)
        plan = attn_metadata.plan
        n = attn_metadata.num_actual_tokens
        if attn_metadata.uniform_decode:
            # n is fixed for a captured batch; padded requests inside it come out as zeros
            output[n:].fill_(0)
            self._decode_step(query[:n], key[:n], value[:n], records, attn_metadata, output[:n])
            return output
        # KVARN_FUSED_DECODE=0 sends verification to the general path's reference, as it does chunks
        if attn_metadata.uniform_verify and (self.config.fused_decode or not self._kernels(query)):
            output[n:].fill_(0)
            self._verify_step(query[:n], key[:n], value[:n], records, attn_metadata, output[:n])
            return output
        # Padding tokens (past the last request) get 0, never uninitialized memory.
        output[int(attn_metadata.query_start_loc_cpu[-1]) :].fill_(0)

        self._flush(records, plan)
        self._write(key[:n], value[:n], plan)
        self._attend(query[:n], key[:n], value[:n], records, attn_metadata, output[:n])
        return output

    def _flush(self, records: torch.Tensor, plan: SlotPlan) -> None:
        """Compress every block whose tokens are all committed (before this step writes the pool):
        the plan's fixed-size list by slot, empty entries skipped on the device (no host read)."""
        assert self.pool_k is not None and self.pool_v is not None
        from vllm.v1.attention.ops.kvarn.step import flush

        flush(
            records,
            self.pool_k,
            self.pool_v,
            plan.flush_by_slot,
            self.layout,
            self.config.sinkhorn_iters,
            kernels=self._kernels(records),
        )

    def _write(self, key: torch.Tensor, value: torch.Tensor, plan: SlotPlan) -> None:
        """Every new token goes, rotated, into its block's pool slot (padding tokens are dropped)."""
        assert self.pool_k is not None and self.pool_v is not None and self.h16 is not None
        from vllm.v1.attention.ops.kvarn.step import write

        write(
            self.pool_k, self.pool_v, self.h16, key, value, plan.write_slots, plan.write_rows,
            kernels=self._kernels(key),
        )  # fmt: skip

    def _decode_step(self, query, key, value, records, md: KVarNMetadata, out) -> None:
        """A step of single-token decodes (request b is token b), with no host read: flush, write and
        decode as ops/kvarn/step.py does them, the launch fixed per batch size (a captured graph
        replays it at every length up to max_model_len). Padding rows come out as zeros."""
        assert self.pool_k is not None and self.pool_v is not None and self.h16 is not None
        assert md.comp_end is not None and md.block_slot is not None
        from vllm.v1.attention.ops.kvarn.step import decode_step, fixed_launch

        b = query.shape[0]
        launch = self._launches.get(b)
        if launch is None:
            launch = self._launches[b] = fixed_launch(
                b,
                self.num_kv_heads,
                self.head_size,
                self.max_model_len,
                self.group,
                self.config,
                query.device,
            )
        plan = md.plan
        decode_step(
            query,
            key,
            value,
            records,
            self.pool_k,
            self.pool_v,
            self.h16,
            plan.flush_by_slot,
            plan.write_slots,
            plan.write_rows,
            md.block_slot,
            md.block_table[:b],
            md.seq_lens[:b],
            md.comp_end[:b],
            self.layout,
            self.config,
            self.scale,
            launch,
            max_model_len=self.max_model_len,
            workspace=self._workspace,
            kernels=self._kernels(query),
            out=out,
        )

    def _verify_step(self, query, key, value, records, md: KVarNMetadata, out) -> None:
        """A step in which every request has ``md.uniform_verify`` query tokens (speculative
        verification), with no host read on CUDA: flush, write and the one-pass kernel with its
        launch fixed by the batch (``step.verify_step``). Padding requests come out as zeros."""
        assert self.pool_k is not None and self.pool_v is not None and self.h16 is not None
        assert md.block_slot is not None
        from vllm.v1.attention.ops.kvarn.step import verify_step

        plan = md.plan
        r = query.shape[0] // md.uniform_verify
        o = verify_step(
            query,
            key,
            value,
            records,
            self.pool_k,
            self.pool_v,
            self.h16,
            plan.flush_by_slot,
            plan.write_slots,
            plan.write_rows,
            md.block_slot,
            md.block_table[:r],
            md.query_start_loc[: r + 1],
            md.seq_lens[:r],
            self.layout,
            self.config,
            self.scale,
            q_len=md.uniform_verify,
            max_model_len=self.max_model_len,
            kernels=self._kernels(query),
        )
        out.copy_(o.to(out.dtype))

    def _attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        records: torch.Tensor,
        md: KVarNMetadata,
        out: torch.Tensor,
    ) -> None:
        qsl = md.query_start_loc_cpu.tolist()
        num_reqs = len(qsl) - 1
        committed = md.plan.committed  # device, exact
        committed_cpu = committed.tolist()  # one sync per layer: the eager path
        decode_rows = [
            i for i in range(num_reqs) if qsl[i + 1] - qsl[i] == 1 and committed_cpu[i] > 0
        ]
        decoded = set(decode_rows)
        if decode_rows:
            self._decode(query, records, md, out, decode_rows, qsl)
        if self._kernels(query) and self.config.fused_decode:
            # Multi-token queries over a cached prefix: one fused launch (ops/kvarn/triton_prefix)
            cont = [
                i
                for i in range(num_reqs)
                if qsl[i + 1] - qsl[i] > 1 and committed_cpu[i] > 0 and i not in decoded
            ]
            if cont:
                self._prefix(query, records, md, out, cont, qsl, committed_cpu)
                decoded.update(cont)
        for i in range(num_reqs):
            lo, hi = qsl[i], qsl[i + 1]
            if hi <= lo or i in decoded:
                continue
            q = query[lo:hi]
            if committed_cpu[i] == 0:
                # The first prefill chunk attends over its own raw K/V (nothing is cached yet).
                out[lo:hi] = self._sdpa(q, key[lo:hi], value[lo:hi], 0).to(out.dtype)
            else:
                k, v = self._gather(records, md, i, committed_cpu[i] + (hi - lo))
                out[lo:hi] = self._sdpa_rotated(q, k, v, committed_cpu[i]).to(out.dtype)

    def _prefix(
        self, query, records, md: KVarNMetadata, out, rows: list[int], qsl: list[int], committed
    ) -> None:
        """Requests ``rows`` (multi-token, something committed) in one call of the fused multi-token
        path (``triton_prefix.kvarn_prefix_attention``: one pass or dense, by query length)."""
        assert self.pool_k is not None and self.pool_v is not None and self.h16 is not None
        from vllm.v1.attention.ops.kvarn.triton_prefix import kvarn_prefix_attention

        o = kvarn_prefix_attention(
            query,
            records,
            self.pool_k,
            self.pool_v,
            md.block_slot,
            md.block_table,
            md.query_start_loc,
            md.seq_lens,
            self.layout,
            self.h16,
            self.scale,
            query_start_loc_cpu=qsl,
            # exact (seq_lens_cpu is an upper bound under async speculative decoding)
            seq_lens_cpu=[c + qsl[i + 1] - qsl[i] for i, c in enumerate(committed)],
            requests=rows,
        )
        for i in rows:
            out[qsl[i] : qsl[i + 1]] = o[qsl[i] : qsl[i + 1]].to(out.dtype)

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int) -> torch.Tensor:
        """Causal attention of q (positions past..past+Lq-1) over k/v (positions 0..past+Lq-1).

        On CUDA in the activations' 16-bit dtype (SDPA's flash / memory-efficient kernels: no Lq x Lk
        score matrix), grouped-query heads without copies; on the CPU in fp32 (tests)."""
        lq, lk = q.shape[0], k.shape[0]
        cdt = q.dtype if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) else torch.float32
        qh = q.transpose(0, 1).to(cdt)  # [Hq, Lq, D]
        kh = k.transpose(0, 1).to(cdt)  # [Hkv, Lk, D]
        vh = v.transpose(0, 1).to(cdt)
        gqa = self.num_heads != self.num_kv_heads
        if past == 0 and lq == lk:
            o = F.scaled_dot_product_attention(
                qh, kh, vh, is_causal=True, scale=self.scale, enable_gqa=gqa
            )
        else:
            pos_q = torch.arange(past, past + lq, device=q.device)[:, None]
            pos_k = torch.arange(lk, device=q.device)[None, :]
            o = F.scaled_dot_product_attention(
                qh, kh, vh, attn_mask=pos_k <= pos_q, scale=self.scale, enable_gqa=gqa
            )
        return o.transpose(0, 1)

    def _sdpa_rotated(self, q, k, v, past: int) -> torch.Tensor:
        """Attention in the rotated basis (the cache's): q·H in, o·H out (H is its own inverse)."""
        assert self.h16 is not None
        h = self.h16.float()
        return self._sdpa((q.float() @ h).to(q.dtype), k, v, past).float() @ h

    def _gather(self, records, md: KVarNMetadata, i: int, length: int):
        from vllm.v1.attention.ops.kvarn.reference import gather_kv

        nblk = math.ceil(length / self.group)
        assert self.pool_k is not None and self.pool_v is not None
        k, v = gather_kv(
            records, self.pool_k, self.pool_v, md.block_slot, md.block_table[i, :nblk], self.layout
        )
        return k[:length], v[:length]

    def _decode(
        self, query, records, md: KVarNMetadata, out, rows: list[int], qsl: list[int]
    ) -> None:
        assert self.pool_k is not None and self.pool_v is not None and self.h16 is not None
        idx = torch.tensor([qsl[i] for i in rows], device=query.device)
        ridx = torch.tensor(rows, device=query.device)
        q = query[idx]  # [B, Hq, D]
        args = (
            q,
            records,
            self.pool_k,
            self.pool_v,
            md.block_slot,
            md.block_table[ridx],
            md.seq_lens[ridx],
            self.layout,
            self.h16,
            self.scale,
        )
        if self._kernels(records):
            # The fused kernel (with KVARN_FUSED_DECODE=0, kvarn_decode runs the reference).
            from vllm.v1.attention.ops.kvarn.triton_decode import kvarn_decode

            o = kvarn_decode(
                *args,
                self.config,
                comp_end=None if md.comp_end is None else md.comp_end[ridx],
                max_seq_len=md.max_seq_len,
                workspace=self._workspace,
            )
        else:  # no GPU (CPU tests): the torch reference the kernel is tested against
            from vllm.v1.attention.ops.kvarn.reference import reference_decode

            o = reference_decode(*args)
        out[idx] = o.to(out.dtype)
