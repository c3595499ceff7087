"""One layer's decode step with no host synchronization: flush, write, attend.

A step of single-token queries (every request decodes one token) does three things per layer, in
this order: compress the pool blocks the plan flushes (``SlotPlan.flush_by_slot``: a fixed-size
list by slot, -1 where nothing flushes), write the step's K/V rotated into the pool (the two in one
launch on CUDA for a few requests: ``flush_write``), then run the fused decode over the two tiers.
Every size here is fixed by the batch and the engine's limits, and no value is read back to the
host, so the same calls run eagerly and inside a CUDA graph (the backend's uniform-decode path,
and the 200-step graph test in tests_vllm/kvarn/test_step.py).
``verify_step`` does the same for a step in which every request has the same few query tokens
(speculative verification), through the one-pass kernel of ``triton_prefix``.

What makes that possible:

- the store kernel skips empty entries on the device, so the flush list is never compacted;
- the decode launch (split count, warps) is fixed per batch size from the longest context the
  engine admits (``fixed_launch``), not from this step's longest sequence: a split with nothing to
  read costs a program that returns at once, and nothing is recompiled as sequences grow;
- rows of padding (sequence length 0, which a padded graph batch has) come out as zeros.

No vLLM import: the module runs on a bare GPU machine and, on the CPU, through the torch reference.
"""

from __future__ import annotations

import operator

import torch

from .config import KVarNConfig
from .hadamard import rotate
from .layout import RecordLayout

_SLOT_IDS: dict[tuple[torch.device, int], torch.Tensor] = {}


def slot_ids(n: int, device: torch.device) -> torch.Tensor:
    """int32 [0, n): the store kernel's slot argument for a list by slot (made once per size)."""
    key = (device, n)
    ids = _SLOT_IDS.get(key)
    if ids is None:
        ids = _SLOT_IDS[key] = torch.arange(n, dtype=torch.int32, device=device)
    return ids


def fixed_launch(
    batch: int,
    num_kv_heads: int,
    head_size: int,
    max_model_len: int,
    group: int,
    config: KVarNConfig,
    device: torch.device,
) -> tuple[int, int]:
    """(splits, warps) of the decode launch for ``batch`` requests at any length up to
    ``max_model_len``: the policy's choice for the longest context, so a captured step stays right
    (and no slower than a launch of one split) while its sequences grow."""
    from .triton_decode import _num_sms, choose_splits, choose_warps

    max_blocks = -(-max_model_len // group)
    sms = _num_sms(device)
    if device.type == "cuda":
        warps = choose_warps(batch, num_kv_heads, max_blocks, sms, config, head_size)
    else:  # the interpreter runs the 4-warp layouts
        warps = 4
    splits = choose_splits(batch, num_kv_heads, max_blocks, sms, config, warps)
    return max(1, min(splits, config.max_splits)), warps


def flush(
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    flush_by_slot: torch.Tensor,
    layout: RecordLayout,
    iters: int,
    *,
    kernels: bool | None = None,
) -> None:
    """Compress slot s into block ``flush_by_slot[s]`` wherever that is not -1 (all KV heads)."""
    slots = slot_ids(flush_by_slot.shape[0], flush_by_slot.device)
    if cache.is_cuda if kernels is None else kernels:
        from .triton_store import store_blocks

        store_blocks(cache, pool_k, pool_v, slots, flush_by_slot, layout, iters)
    else:  # the CPU: the torch reference the kernel is tested against (it masks on the host)
        from .reference import flush_reference

        flush_reference(cache, pool_k, pool_v, slots, flush_by_slot, layout, iters)


def write(
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    h16: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    write_slots: torch.Tensor,
    write_rows: torch.Tensor,
    *,
    kernels: bool | None = None,
) -> None:
    """Every token, rotated, into its pool slot and row; a token with slot -1 (padding) goes to the
    pools' last slot, which is never read. On CUDA one kernel (``triton_store.rotate_write``)."""
    if key.is_cuda if kernels is None else kernels:
        from .triton_store import rotate_write

        rotate_write(pool_k, pool_v, h16, key, value, write_slots, write_rows)
        return
    trash = pool_k.shape[0] - 1
    slots = torch.where(write_slots >= 0, write_slots, trash)
    pool_k[slots, write_rows] = rotate(key, h16)
    pool_v[slots, write_rows] = rotate(value, h16)


_ONE_WAVE: dict[tuple, bool] = {}


def _one_wave(shape: torch.Size, device: torch.device) -> bool:
    """Whether a write of ``shape`` [T, Hkv, D] has no more programs than the GPU has SMs (decided
    once per shape and device, without the imports: a step's host time is what the one launch is
    for)."""
    key = (shape, device)
    got = _ONE_WAVE.get(key)
    if got is None:
        from .triton_decode import _num_sms
        from .triton_store import ROTATE_COLUMNS

        t, hkv, d = shape
        got = _ONE_WAVE[key] = t * hkv * (d // ROTATE_COLUMNS) <= _num_sms(device)
    return got


def flush_write(
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    flush_by_slot: torch.Tensor,
    h16: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    write_slots: torch.Tensor,
    write_rows: torch.Tensor,
    layout: RecordLayout,
    iters: int,
    *,
    kernels: bool | None = None,
    workspace=None,
    fused: bool | None = None,
) -> None:
    """``flush`` then ``write``, as a step needs them (a slot the flush frees may take one of this
    step's tokens). On CUDA, where the write's programs fit in one wave of the GPU's SMs (a step of
    a few requests, host-bound: a launch fewer is what counts there), one launch
    (``LayerStore.flush_write``); else the store kernel then the write kernel (a larger batch: the
    write's many small programs run faster in their own 4-warp kernel than at the flush's 8-16
    warps, which hold an SM each: run 58 in a graph, batch 128, D 256, 8K: 426 -> 595 µs a step
    fused). ``fused`` overrides that choice (tests). The layer's store is bound once when a
    ``workspace`` (``triton_decode.DecodeWorkspace``) is given."""
    if cache.is_cuda if kernels is None else kernels:
        if fused is None:
            fused = _one_wave(key.shape, key.device)
        if workspace is not None:
            bound = workspace.store(cache, pool_k, pool_v, layout)
        else:
            from .triton_store import LayerStore

            bound = LayerStore(cache, pool_k, pool_v, layout, bind=False)
        if fused:
            bound.flush_write(flush_by_slot, iters, h16, key, value, write_slots, write_rows)
            return
        from .triton_store import rotate_write

        bound.store(slot_ids(flush_by_slot.shape[0], flush_by_slot.device), flush_by_slot, iters)
        rotate_write(pool_k, pool_v, h16, key, value, write_slots, write_rows)
        return
    flush(cache, pool_k, pool_v, flush_by_slot, layout, iters, kernels=False)
    write(pool_k, pool_v, h16, key, value, write_slots, write_rows, kernels=False)


def decode_step(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    h16: torch.Tensor,
    flush_by_slot: torch.Tensor,
    write_slots: torch.Tensor,
    write_rows: torch.Tensor,
    block_slot: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    comp_end: torch.Tensor,
    layout: RecordLayout,
    config: KVarNConfig,
    scale: float,
    launch: tuple[int, int],
    *,
    max_model_len: int,
    workspace=None,
    kernels: bool | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """One token per request: query/key/value [B, H, D] (row b is request b), the plan's lists,
    the slot map after this step's plan, the requests' block table [B, W], sequence lengths [B]
    (this token included; 0 = padding) and ``comp_end`` [B]. Returns the attention output [B, Hq, D]
    in the query's dtype, or writes it into ``out`` (its dtype) and returns that; padding rows are
    zeros. ``launch`` is ``fixed_launch``'s (splits, warps). On CUDA the step is three launches
    for a few requests, four for more (``flush_write``: the flush and the write), the decode and
    its combine, which writes the result (one fewer with one split: the product with H is then a
    GEMM and the result a copy).
    ``kernels``: the Triton kernels (default on CUDA) or the torch reference; tests pass True on
    the CPU to run the kernels in Triton's interpreter. With a ``workspace`` the kernels' launches
    are prepared by the first step of a layer and batch size and taken directly by the next
    (``_prepare``): eager, a step's host time is most of it at batch 1."""
    kernels = cache.is_cuda if kernels is None else kernels
    if kernels and workspace is not None:
        ready = workspace.steps.get((id(cache), query.shape[0]))
        if ready is not None and ready[1] == (query.shape, query.dtype, key.shape, scale, launch):
            objs, _, store, fused, bound, plan, check_out, rotate_write = ready
            if all(map(operator.is_, objs, (cache, pool_k, pool_v, h16, layout, config))):
                check_out(out, query)
                iters = config.sinkhorn_iters
                if fused:
                    store.flush_write(
                        flush_by_slot, iters, h16, key, value, write_slots, write_rows
                    )
                else:
                    store.store(slot_ids(flush_by_slot.shape[0], flush_by_slot.device),
                                flush_by_slot, iters)  # fmt: skip
                    rotate_write(pool_k, pool_v, h16, key, value, write_slots, write_rows)
                return bound.run(query, block_slot, block_table, seq_lens, comp_end, plan, out)
    if kernels:
        from .triton_decode import check_out, kvarn_decode

        check_out(out, query)  # before anything is written
    flush_write(cache, pool_k, pool_v, flush_by_slot, h16, key, value, write_slots, write_rows,
                layout, config.sinkhorn_iters, kernels=kernels, workspace=workspace)  # fmt: skip
    if kernels:
        if workspace is not None and config.fused_decode and query.shape[0]:
            # what kvarn_decode would do, kept for the next step (a padding row reads nothing,
            # and the kernel gives it exactly 0)
            bound, plan = _prepare(query, key, cache, pool_k, pool_v, h16, seq_lens, layout,
                                   config, scale, launch, workspace,
                                   (block_slot, block_table, comp_end))  # fmt: skip
            return bound.run(query, block_slot, block_table, seq_lens, comp_end, plan, out)
        splits, warps = launch
        return kvarn_decode(
            query,
            cache,
            pool_k,
            pool_v,
            block_slot,
            block_table,
            seq_lens,
            layout,
            h16,
            scale,
            config,
            comp_end=comp_end,
            max_seq_len=max_model_len,
            num_splits=splits,
            num_warps=warps,
            workspace=workspace,
            out=out,
        )
    from .reference import reference_decode

    ref = reference_decode(
        query, cache, pool_k, pool_v, block_slot, block_table, seq_lens, layout, h16, scale
    )
    ref = torch.where((seq_lens > 0)[:, None, None], ref, ref.new_zeros(()))
    if out is None:
        return ref.to(query.dtype)
    return out.copy_(ref)


def _prepare(query, key, cache, pool_k, pool_v, h16, seq_lens, layout, config, scale, launch,
             workspace, compile_with) -> tuple:  # fmt: skip
    """Keeps what ``decode_step`` launches for this layer and batch size in ``workspace.steps``:
    its ``LayerStore``, whether the flush and the write go in one launch, the bound decode launch
    and its plan (the calls ``kvarn_decode`` makes; the last two returned), so that the next step
    with the same layer objects (known by identity, as ``triton_decode._recall`` knows them) and
    the same shapes launches them directly: no per-step planning, the lookups made once (issue
    #24, eager host time). The entry holds the functions the step calls too (a step imports
    nothing)."""
    from .triton_decode import check_out, prepare
    from .triton_store import rotate_write

    splits, warps = launch
    bound, plan = prepare(query, cache, pool_k, pool_v, seq_lens, layout, h16, scale, config,
                          workspace, num_splits=splits, num_warps=warps,
                          compile_with=compile_with)  # fmt: skip
    store = workspace.store(cache, pool_k, pool_v, layout)
    fused = _one_wave(key.shape, key.device)
    objs = (cache, pool_k, pool_v, h16, layout, config)
    shapes = (query.shape, query.dtype, key.shape, scale, launch)
    steps = workspace.steps
    if len(steps) >= 4096:
        steps.clear()  # a caller whose layers are new every step: no leak
    # the entry holds its objects, so their ids are not another object's while it is there
    steps[id(cache), query.shape[0]] = (objs, shapes, store, fused, bound, plan, check_out,
                                        rotate_write)  # fmt: skip
    return bound, plan


def verify_step(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    h16: torch.Tensor,
    flush_by_slot: torch.Tensor,
    write_slots: torch.Tensor,
    write_rows: torch.Tensor,
    block_slot: torch.Tensor,
    block_table: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    layout: RecordLayout,
    config: KVarNConfig,
    scale: float,
    *,
    q_len: int,
    max_model_len: int,
    kernels: bool | None = None,
) -> torch.Tensor:
    """A step in which every request has ``q_len`` query tokens (speculative verification, 1 + k;
    request b owns tokens b·q_len ...): flush, write, then causal attention of each token over its
    request's cache through ``triton_prefix.uniform_prefix_attention``, with no host read, so it
    can be captured like ``decode_step``. Requests of sequence length 0 (padding) come out as zeros.
    On the CPU (``kernels`` False) the torch reference, which reads the lengths on the host."""
    kernels = cache.is_cuda if kernels is None else kernels
    flush_write(cache, pool_k, pool_v, flush_by_slot, h16, key, value, write_slots, write_rows,
                layout, config.sinkhorn_iters, kernels=kernels)  # fmt: skip
    if kernels:
        from .triton_prefix import uniform_prefix_attention

        return uniform_prefix_attention(
            query, cache, pool_k, pool_v, block_slot, block_table, query_start_loc, seq_lens,
            layout, h16, scale, q_len=q_len, max_model_len=max_model_len,
        )  # fmt: skip
    from .reference import reference_prefix

    return reference_prefix(
        query, cache, pool_k, pool_v, block_slot, block_table, query_start_loc.tolist(),
        seq_lens.tolist(), layout, h16, scale,
    ).to(query.dtype)  # fmt: skip
