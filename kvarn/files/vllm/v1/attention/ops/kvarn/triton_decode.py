"""The fused KVarN decode's host side: ``kvarn_decode`` and ``prepare`` bind a layer's tensors to
the kernels of ``decode_kernels`` and ``decode_combine`` once (``_Launch``, kept in a
``DecodeWorkspace``) and launch them; the split and warp counts come from ``decode_plan``. The
policy's public names and the kernels and helpers that tests and probes reach as
``triton_decode.X`` are re-exported here.

Module split (issue #40): ``decode_plan`` (policy, no Triton kernels) <- the ``@triton.jit`` code
(``decode_kernels`` <- ``decode_bytes``, ``decode_words``, ``decode_rotation``, ``decode_shares``;
``decode_combine`` <- ``decode_shares``) <- ``triton_decode`` (launch binding) -> ``triton_store``;
none imports a module that imports it back.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import triton

from .config import KVarNConfig
from .decode_bytes import _crumbs, _nibbles  # noqa: F401  (re-exported)
from .decode_combine import (  # noqa: F401  (re-exported)
    _kvarn_combine_head_rot_kernel,
    _kvarn_combine_kernel,
    _kvarn_combine_rot_kernel,
)
from .decode_kernels import LOG2E, _kvarn_decode_kernel
from .decode_plan import (  # noqa: F401  (re-exported)
    FILL,
    L2_PREFETCH,
    MAXNREG,
    MAXNREG_BYTES,
    RESIDENT_WARPS,
    WARPS,
    _num_sms,
    choose_splits,
    choose_warps,
    compressed_end_from_slots,
    l2_prefetch_blocks,
    split_rows,
)
from .decode_rotation import _rotate_q  # noqa: F401  (re-exported)
from .decode_shares import MIN_SPLIT_UNITS, POOL_COST, _shares  # noqa: F401  (re-exported)
from .decode_words import _crumb16, _nib16  # noqa: F401  (re-exported)
from .launch import binding, kwargs_key, launch
from .layout import RecordLayout
from .triton_store import LayerStore


class DecodeWorkspace:
    """Split-K partials of a step, packed (rows b·splits + split of [rows, Hq, D] and [rows, Hq]),
    so a step takes batch x splits rows, which the launch policy keeps small (``split_rows``); the
    strides never change with the step (no new specialization). Grown on demand, reused."""

    def __init__(self) -> None:
        self.part: torch.Tensor | None = None
        self.lse: torch.Tensor | None = None
        self.held = (0, 0, 0, None)  # (rows, hq, d, device) of part and lse
        self.args: tuple = ()  # partials(): part and lse with their strides
        # per layer (its cache, pools, slot map, rotation, layout, config): the bound launch
        self.launches: dict[tuple, _Launch] = {}
        # id(cache) -> (the objects a call passed, (its numbers, its bound launch)): the same
        # objects as last time are the same layer without building the key above (_recall)
        self.seen: dict[int, tuple] = {}
        self.stores: dict[int, tuple] = {}  # id(cache) -> ((cache, pools, layout), LayerStore)
        # (id(cache), batch) -> (a decode step's layer objects, its prepared launches: step.py)
        self.steps: dict[tuple[int, int], tuple] = {}

    def store(self, cache: torch.Tensor, pool_k: torch.Tensor, pool_v: torch.Tensor, layout):
        """The layer's ``triton_store.LayerStore`` (its flush and pool write, bound once), known
        by the identity of the objects passed as ``seen`` knows a layer's decode launch."""
        objs = (cache, pool_k, pool_v, layout)
        bound = _recall(self.stores, objs)
        if bound is None:
            bound = _remember(self.stores, objs, LayerStore(cache, pool_k, pool_v, layout))
        return bound

    def get(self, rows: int, hq: int, d: int, device: torch.device):
        """(part, lse) with room for ``rows`` rows (what the backend reserves up front)."""
        args = self.partials(rows, hq, d, device)
        return args[0], args[3]

    def partials(self, rows: int, hq: int, d: int, device: torch.device) -> tuple:
        """``get``'s partials with their strides, as the decode and combine kernels take them:
        (part, its strides 0 and 1, lse, its strides 0 and 1)."""
        n, h, dd, dev = self.held
        if rows > n or h != hq or dd != d or dev != device:
            self.grow(rows, hq, d, device)
        return self.args

    def grow(self, rows: int, hq: int, d: int, device: torch.device) -> None:
        n, h, dd, dev = self.held
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        n = max(rows, n if (h, dd, dev) == (hq, d, device) else 0)
        self.part = torch.empty(n, hq, d, dtype=torch.float32, device=device)
        self.lse = torch.empty(n, hq, dtype=torch.float32, device=device)
        self.held = (n, hq, d, device)
        part, lse = self.part, self.lse
        self.args = (part, part.stride(0), part.stride(1), lse, lse.stride(0), lse.stride(1))


def kvarn_decode(
    q: torch.Tensor,
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    block_slot: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    layout: RecordLayout,
    h16: torch.Tensor,
    scale: float,
    config: KVarNConfig,
    *,
    comp_end: torch.Tensor | None = None,
    max_seq_len: int | None = None,
    num_splits: int | None = None,
    workspace: DecodeWorkspace | None = None,
    num_warps: int | None = None,
    combine_heads: int | None = None,
    deq: int = 3,
    prefetch: bool = False,
    rotate_in_kernel: bool | None = None,
    l2_prefetch: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode attention over the two-tier cache; q [B, Hq, D] un-rotated; returns [B, Hq, D] in
    q's dtype, or writes it into ``out`` ([B, Hq, D], its own dtype, last dimension contiguous:
    the combine kernel writes it there, so a caller's buffer costs no copy) and returns that.
    ``h16`` is the cache's rotation, the symmetric Hadamard matrix (``hadamard.py``).

    ``comp_end`` int32 [B]: blocks [1, comp_end) of each request are compressed (so the hot loop
    needs no slot lookup); the sink and later blocks are read as ``block_slot`` says. Pass it when
    known (``TwoTierBook.compressed_end``); by default it is derived from ``block_slot`` on the device
    (no host sync). ``num_splits``, ``num_warps`` and ``combine_heads`` (1 or 16 query heads per
    combine program) override the launch policy (``choose_splits``, ``choose_warps``,
    ``COMBINE_PER_HEAD_ROWS``); ``deq``/``prefetch`` pick kernel variants (fixed per deployment).
    ``rotate_in_kernel`` (word path only, and its default): the kernel rotates q in its prologue
    (``_rotate_q``) instead of a GEMM (and a cast) launched before it: two launches fewer a step,
    faster on every row of the benchmark (probe run 21, with the L2 prefetch: 1.43-1.47x at batch 1
    and 32K, 2.5-18% from batch 32 on). ``l2_prefetch`` (word path on CUDA; default ``L2_PREFETCH``):
    blocks prefetched into L2 ahead of the one being computed.
    """
    b, hq, d = q.shape
    if not config.fused_decode:
        _check_heads(hq, cache)
        from .reference import reference_decode

        ref = reference_decode(
            q, cache, pool_k, pool_v, block_slot, block_table, seq_lens, layout, h16, scale
        )
        return _into(out, ref.to(q.dtype))
    check_out(out, q)
    if b == 0:
        return torch.empty(0, hq, d, dtype=q.dtype, device=q.device) if out is None else out
    if comp_end is None:
        comp_end = compressed_end_from_slots(block_slot, block_table, seq_lens, layout.group)
    ws = workspace or DecodeWorkspace()
    step, plan = prepare(
        q, cache, pool_k, pool_v, seq_lens, layout, h16, scale, config, ws,
        max_seq_len=max_seq_len, num_splits=num_splits, num_warps=num_warps,
        combine_heads=combine_heads, deq=deq, prefetch=prefetch,
        rotate_in_kernel=rotate_in_kernel, l2_prefetch=l2_prefetch,
        compile_with=(block_slot, block_table, comp_end),
    )  # fmt: skip
    return step.run(q, block_slot, block_table, seq_lens, comp_end, plan, out)


def check_out(out: torch.Tensor | None, q: torch.Tensor) -> None:
    """``out`` takes q's shape with a contiguous last dimension (the combine writes it there)."""
    if out is not None and (out.shape != q.shape or out.stride(2) != 1):
        b, hq, d = q.shape
        raise ValueError(f"out: [{b}, {hq}, {d}] with a contiguous last dimension, not {out.shape}")


def prepare(
    q: torch.Tensor,
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    seq_lens: torch.Tensor,
    layout: RecordLayout,
    h16: torch.Tensor,
    scale: float,
    config: KVarNConfig,
    ws: DecodeWorkspace,
    *,
    compile_with: tuple,
    max_seq_len: int | None = None,
    num_splits: int | None = None,
    num_warps: int | None = None,
    combine_heads: int | None = None,
    deq: int = 3,
    prefetch: bool = False,
    rotate_in_kernel: bool | None = None,
    l2_prefetch: int | None = None,
) -> tuple[_Launch, tuple]:
    """The layer's bound launch and the plan of this call (``kvarn_decode``'s arguments and
    defaults): what ``_Launch.run`` then launches over a step's tensors. ``compile_with``
    (block_slot, block_table, comp_end): what the first call of a policy's launch compiles its
    variants over."""
    b, hq, d = q.shape
    step = _bound(ws, cache, pool_k, pool_v, h16, layout, config, deq, prefetch, scale, l2_prefetch)
    policy = num_warps is None or num_splits is None
    if policy and max_seq_len is None:
        max_seq_len = int(seq_lens.max())
    # What the policy picks for this batch and length (or the caller fixed), with the kernels'
    # constants, is planned once per layer and kept: a step repeats it at a dict lookup.
    pkey = (b, hq, q.dtype, max_seq_len if policy else None, num_warps, num_splits,
            combine_heads, rotate_in_kernel)  # fmt: skip
    plan = step.plans.get(pkey)
    if plan is None:
        hkv = _check_heads(hq, cache)
        if layout.preset.k_bits != 4:
            raise ValueError(f"{layout.preset.name}: the decode kernel is built for 4-bit keys")
        if rotate_in_kernel and deq != 3:
            raise ValueError("rotate_in_kernel: the word path (deq=3) only")
        rot = deq == 3 if rotate_in_kernel is None else rotate_in_kernel
        # the word path's warp counts are CUDA's; the interpreter runs the 4-warp layouts
        auto = deq == 3 and q.is_cuda
        base = WARPS.get(d, 2) if auto else 4
        warps, splits = num_warps, num_splits
        if policy:
            max_blocks = -(-max_seq_len // layout.group)
            sms = _num_sms(q.device)
            if warps is None:
                warps = choose_warps(b, hkv, max_blocks, sms, config, d) if auto else base
            if splits is None:
                splits = choose_splits(b, hkv, max_blocks, sms, config, warps)
        splits = max(1, min(splits, config.max_splits))
        heads = combine_heads
        if heads is None:
            heads = 1 if b * hq <= COMBINE_PER_HEAD_ROWS else 16
        # a launch fixed by the caller (a step's fixed_launch, tests, benchmarks) is not the
        # policy's: nothing to compile ahead
        if auto and policy:
            block_slot, block_table, comp_end = compile_with
            step.compile_variants(
                q, block_slot, block_table, seq_lens, comp_end, (base, 2 * base), rot
            )
        if len(step.plans) >= MAX_BOUND_LAUNCHES:
            step.plans.clear()
        plan = step.plans[pkey] = step.plan(hq, d, warps, splits, heads, rot, q.is_cuda)
    return step, plan


def _check_heads(hq: int, cache: torch.Tensor) -> int:
    hkv = cache.shape[1]
    if hq % hkv:
        raise ValueError(f"query heads {hq} are not a multiple of KV heads {hkv}")
    return hkv


def _bound(ws, cache, pool_k, pool_v, h16, layout, config, deq, prefetch, scale, l2_prefetch):
    """The layer's bound launch in ``ws``: what stays fixed across its steps, bound once."""
    fixed = (deq, prefetch, scale, l2_prefetch)
    objs = (cache, pool_k, pool_v, h16, layout, config)
    seen = _recall(ws.seen, objs)
    if seen is not None and seen[0] == fixed:  # the numbers by value: a scale is often recomputed
        return seen[1]
    # One _Launch per layer for the workspace's life. A layer's cache may come as a new view every
    # step (the backend folds its pages), so it is known by its memory and geometry; the _Launch
    # holds the first view, so the memory cannot be another allocation's while it is a key.
    key = (cache.data_ptr(), cache.shape, cache.stride(), cache.dtype, pool_k.data_ptr(),
           pool_v.data_ptr(), pool_k.shape, pool_k.stride(), h16.data_ptr(), id(layout),
           id(config), *fixed)  # fmt: skip
    step = ws.launches.get(key)
    if step is None:
        d = h16.shape[0]
        l2pf = l2_prefetch_blocks(cache.device, d, l2_prefetch) if deq == 3 else 0
        if l2pf and (cache.data_ptr() % 16 or cache.stride(0) % 16 or cache.stride(1) % 16):
            l2pf = 0  # the bulk prefetch takes 16-byte aligned records (layouts pad to 64 or 128)
        if len(ws.launches) >= MAX_BOUND_LAUNCHES:
            ws.launches.clear()  # a caller whose pools move every step: no leak, no caching
        step = _Launch(cache, pool_k, pool_v, layout, h16, config, deq, prefetch, ws, scale, l2pf)
        ws.launches[key] = step
    _remember(ws.seen, objs, (fixed, step))
    return step


def _recall(memo: dict, objs: tuple) -> Any:
    """What ``memo`` holds for these very objects (compared by identity), or None. An entry holds
    its objects, so their ids are not another object's while it is there."""
    got = memo.get(id(objs[0]))
    if got is not None and all(map(operator.is_, got[0], objs)):
        return got[1]
    return None


def _remember(memo: dict, objs: tuple, value: Any) -> Any:
    if len(memo) >= MAX_BOUND_LAUNCHES:
        memo.clear()  # a caller whose tensors are new every call: no leak
    memo[id(objs[0])] = (objs, value)
    return value


# At most this many query rows (batch x query heads) take the per-head combine (probe runs 15-16:
# it wins at batch 1, by 2-3% at batch 8, and loses 1-4% from batch 32 to the 16-head one), whose
# programs each write COMBINE_ROWS_PER_PROGRAM output channels.
COMBINE_PER_HEAD_ROWS = 256
COMBINE_ROWS_PER_PROGRAM = 64
_COMPILED: set[tuple] = set()


class _Launch:
    """The kernels of one decode call, with what stays fixed across steps bound (so the launch
    that compiles the variants up front and the real one pass the same arguments)."""

    def __init__(
        self,
        cache,
        pool_k,
        pool_v,
        layout,
        h16,
        config,
        deq,
        prefetch,
        ws,
        scale: float,
        l2pf: int,  # blocks prefetched into L2 ahead (word path on CUDA), 0: none
    ):
        self.cache, self.pool_k, self.pool_v = cache, pool_k, pool_v
        self.layout, self.h16, self.config, self.ws = layout, h16.contiguous(), config, ws
        self.deq, self.prefetch, self.q_scale, self.l2pf = deq, prefetch, scale * LOG2E, l2pf
        self.h32 = self.h16.float()  # the single stage's un-rotation
        # arguments 3-11 of the decode kernel: the same at every step of this layer, its tensors
        # passed as their pointers (launch's restore: held here, so the memory stays theirs)
        c16 = cache.view(torch.float16)
        self.fixed = (cache.data_ptr(), c16.data_ptr(), cache.stride(0), cache.stride(1),
                      pool_k.data_ptr(), pool_v.data_ptr(), pool_k.stride(0), pool_k.stride(1),
                      pool_k.stride(2))  # fmt: skip
        self.h16_ptr = self.h16.data_ptr()
        self.restore = ((3, cache), (4, c16), (7, pool_k), (8, pool_v), (17, self.h16))
        self.combine_restore = ((11, self.h16),)
        self.device = cache.device
        self.hkv = cache.shape[1]
        self.compiled: set[tuple] = set()  # (rot, dtype, q shape, warps) compiled ahead
        # (hq, warps, rot, cuda, split) or ("combine", heads, d) -> (kwargs, their key)
        self.consts: dict[tuple, tuple[dict, int]] = {}
        # kvarn_decode's launch plans: (batch, hq, dtype, length or None, its overrides) -> plan
        self.plans: dict[tuple, tuple] = {}
        # a binding per launch shape (hq, D, warps, splits, combine, rotation): within one, the
        # partials' strides, the split count and hq are fixed too, so a step specializes fewer
        # arguments. Keyed by shape, not by plan: plans come and go with the caller's lengths.
        self.bindings: dict[tuple, int] = {}

    def compile_variants(
        self, q, block_slot, block_table, seq_lens, comp_end, warps, rot: bool
    ) -> None:
        """Compiles every variant the policy may pick (each warp count, single stage and split,
        both combines; q rotated as ``rot`` says) on the first call for this shape, by launching
        them over one empty row: later steps only pick among compiled kernels, so a batch of one
        arriving mid-serving does not stall on a compile."""
        mine = (rot, q.dtype, q.shape[1:], tuple(warps))
        if mine in self.compiled:  # this layer's steps: a set lookup, not the key below
            return
        # everything a specialization of these kernels depends on, but per-step values
        key = (
            rot,
            q.device,
            q.dtype,
            q.shape[1:],
            self.cache.shape[1],
            self.layout,
            self.deq,
            self.prefetch,
            self.config.max_splits,
            self.l2pf,
            tuple(warps),
        )
        if key not in _COMPILED:
            empty = torch.zeros_like(seq_lens[:1])
            for w in warps:
                for splits, heads in ((1, 16), (2, 1), (2, 16)):
                    self(q[:1], block_slot, block_table[:1], empty, comp_end[:1], w, splits,
                         heads, rot)  # fmt: skip
            _COMPILED.add(key)
        self.compiled.add(mine)

    def _consts(self, hq: int, d: int, num_warps: int, rot: bool, cuda: bool, split: bool):
        """The decode kernel's constexprs and options for a launch shape, with their key: built
        once per shape and layer."""
        shape = (hq, num_warps, rot, cuda, split)
        got = self.consts.get(shape)
        if got is None:
            lo = self.layout
            qpk = hq // self.cache.shape[1]
            common = dict(
                QPK=qpk,
                QH=max(8, triton.next_power_of_2(qpk)),  # MMA side; 8 pads less
                D=d,
                G=lo.group,
                VB=lo.preset.v_bits,
                K_CODES=lo.k_codes,
                K_SCOL=lo.k_scol,
                K_ZP=lo.k_zp,
                K_SROW=lo.k_srow,
                V_CODES=lo.v_codes,
                V_SCOL=lo.v_scol,
                V_SROW=lo.v_srow,
                V_ZP=lo.v_zp,
                # on CUDA the same codes through PTX: 1 -> 2 (4 bytes at a time), 3 -> 4 (two words)
                DEQ={1: 2, 3: 4}.get(self.deq, self.deq) if cuda else self.deq,
                PREFETCH=self.prefetch,
                ROT_Q=rot,
                L2PF=self.l2pf,
                REC=lo.size,
                IS_SPLIT=split,
                num_warps=num_warps,
            )
            cap = (MAXNREG if self.deq == 3 else MAXNREG_BYTES).get(d)
            if cuda and cap:
                common["maxnreg"] = cap
            got = self.consts[shape] = (common, kwargs_key(common))
        return got

    def __call__(
        self, q, block_slot, block_table, seq_lens, comp_end, num_warps, num_splits, heads, rot,
        out=None,
    ):  # fmt: skip
        """``q`` [B, Hq, D], the caller's; ``rot``: the kernel rotates it (else one GEMM does,
        with the scale as its alpha: the product then a scaling kernel cost a launch more);
        ``out``: where the result goes (None: a new tensor in q's dtype)."""
        _, hq, d = q.shape
        plan = self.plan(hq, d, num_warps, num_splits, heads, rot, q.is_cuda)
        return self.run(q, block_slot, block_table, seq_lens, comp_end, plan, out)

    def plan(self, hq: int, d: int, num_warps: int, num_splits: int, heads: int, rot: bool,
             cuda: bool) -> tuple:  # fmt: skip
        """What a launch of this shape passes besides the step's tensors: the split count, the
        rotation, the decode's and the combine's constants with their keys, the combine kind."""
        split = num_splits != 1
        common, kwkey = self._consts(hq, d, num_warps, rot, cuda, split)
        ckw, ckwkey = self._combine_consts(heads, d)
        shape = (hq, d, num_warps, num_splits, heads, rot, cuda)
        bound = self.bindings.get(shape)
        if bound is None:
            bound = self.bindings[shape] = binding()
        return (num_splits, rot, common, kwkey, heads, ckw, ckwkey, bound)

    def run(self, q, block_slot, block_table, seq_lens, comp_end, plan: tuple, out=None):
        """The launches of ``plan`` over this step's tensors."""
        num_splits, rot, common, kwkey, heads, ckw, ckwkey, bound = plan
        b, hq, d = q.shape
        if rot:
            q_in = q.contiguous()
        else:
            q2 = q.reshape(b * hq, d).float()
            q_in = torch.addmm(q2, q2, self.h32, beta=0.0, alpha=self.q_scale)
            q_in = q_in.view(b, hq, d)
        qs = q_in.stride()
        args = (
            q_in,
            qs[0],
            qs[1],
            *self.fixed,
            block_slot,
            block_table,
            block_table.stride(0),
            seq_lens,
            comp_end,
            self.h16_ptr,
            self.q_scale,
        )
        hkv = self.hkv
        if num_splits == 1:
            o32 = torch.empty(b, hq, d, dtype=torch.float32, device=q_in.device)
            launch(
                _kvarn_decode_kernel,
                (b, hkv, 1),
                (*args, o32, o32.stride(0), o32.stride(1), o32, 0, 0, 1),
                common,
                bound=bound,
                vary=_DECODE_VARY,
                kwkey=kwkey,
                restore=self.restore,
            )
            return _into(out, (o32 @ self.h32).to(q.dtype))
        partials = self.ws.partials(b * num_splits, hq, d, self.device)
        launch(
            _kvarn_decode_kernel,
            (b, hkv, num_splits),
            (*args, *partials, num_splits),
            common,
            bound=bound,
            vary=_DECODE_VARY,
            kwkey=kwkey,
            restore=self.restore,
        )
        res = out if out is not None else torch.empty(b, hq, d, dtype=q.dtype, device=q.device)
        rs = res.stride()
        cargs = (*partials, res, rs[0], rs[1], seq_lens, comp_end, self.h16_ptr)
        # bound: the partials are the workspace's (fp32, allocated whole, strides set by hq and
        # D), H the layer's, hq and the split count the binding's; a step changes the output only
        if heads == 1:
            grid = (b, hq, d // COMBINE_ROWS_PER_PROGRAM)
            launch(_kvarn_combine_head_rot_kernel, grid, (*cargs, num_splits), ckw, kwkey=ckwkey,
                   bound=bound, vary=_COMBINE_VARY, restore=self.combine_restore)  # fmt: skip
        else:
            grid = (b, triton.cdiv(hq, 16))
            launch(_kvarn_combine_rot_kernel, grid, (*cargs, hq, num_splits), ckw, kwkey=ckwkey,
                   bound=bound, vary=_COMBINE_VARY, restore=self.combine_restore)  # fmt: skip
        return res

    def _combine_consts(self, heads: int, d: int) -> tuple[dict, int]:
        """The combine's constexprs and their key, built once per kind and layer."""
        got = self.consts.get(("combine", heads, d))
        if got is None:
            spad = triton.next_power_of_2(self.config.max_splits)
            g = self.layout.group
            if heads == 1:
                kw = dict(
                    D=d, G=g, SPAD=spad, SC=min(spad, 8192 // d), JB=COMBINE_ROWS_PER_PROGRAM,
                    num_warps=4,
                )  # fmt: skip
            else:
                kw = dict(D=d, G=g, SPAD=spad, HB=16, num_warps=4)
            got = self.consts[("combine", heads, d)] = (kw, kwargs_key(kw))
        return got


# The decode kernel's arguments that change from step to step within a binding (q and its strides,
# the slot map, the block table, lengths); the others are the layer's (3-11: cache and pools; 17-18:
# rotation, scale) or the binding's (19-25: the partials, fp32 from torch.empty with strides set by
# hq and D, or a single stage's fp32 output of the same strides, and the split count).
_DECODE_VARY = (0, 1, 2, 12, 13, 14, 15, 16)
# The combine's: its output and the output's strides (the caller's buffer), the lengths.
_COMBINE_VARY = (6, 7, 8, 9, 10)


def _into(out: torch.Tensor | None, res: torch.Tensor) -> torch.Tensor:
    return res if out is None else out.copy_(res)


# More bound launches than this in one workspace: its caller's layers are not stable (cleared).
MAX_BOUND_LAUNCHES = 4096
