"""How the fused decode shares a request's blocks among the splits of a launch (``_shares``,
``_share_of``): the decode kernel and the split-K combines call the same functions with the same
values, so the splits the decode writes are the ones the combines read. Pure ``@triton.jit``
arithmetic on block counts, no loads; ``tests_vllm/kvarn/test_triton_kernels.py`` writes the
shares out for 1-20 splits and checks that they tile the request."""

from __future__ import annotations

import triton
import triton.language as tl

# What a pool block (fp16, 4G·D bytes for K and V) costs against a record when splits are balanced;
# each half of it (``_share_of``) half that.
POOL_COST = tl.constexpr(4)
# The fewest units (records) a split of a request takes before another split does. A launch fixed
# for 128K (a captured step) gave a request of 8K 128 splits of half a block at D=256, each
# rotating q through all of H (run 61: 26 us against 20 for 16 splits, the combine over 128 splits
# 9.8 us against 4.2), so a short request takes only the splits its length fills. 2, not 4, since
# the pool blocks are read in halves and q is rotated without H (runs 82-83: D 256 batch 1 8K,
# 35 splits of 2 units, decode kernel 20.9 -> 13.7 us; every row of the probe faster).
MIN_SPLIT_UNITS = tl.constexpr(2)


@triton.jit
def _shares(seq_len, comp_end, num_splits, G: tl.constexpr):
    """How a request's blocks are shared among the splits of a launch: (blocks, comp_end clamped,
    compressed blocks, tail blocks, the sink's units, units per split, live splits). The shares are
    cut on a line of POOL_COST units (the sink), one unit per compressed block, then POOL_COST units
    per tail block (each pool block is ~4.6x a record's bytes in fp16); split s of the live ones
    takes units [s·per, (s+1)·per): the compressed blocks there, and the pool blocks' halves whose
    units start there (``_share_of``), so at 2 units a split the sink and each tail block are read by
    two programs (one program reading a whole pool block was the critical path of batch 1 at 8K:
    17 us against 21 for 4 records, run 81). Only the first ``live`` splits take a share, each at
    least MIN_SPLIT_UNITS: a launch fixed for the longest context (a captured step) runs a short
    request on as few splits as a launch sized for it would, and the combine reads those only (the
    decode and the combines call this with the same values, so they agree)."""
    nblk = tl.cdiv(seq_len, G)
    c_end = tl.minimum(comp_end, nblk)
    n_comp = tl.maximum(c_end - 1, 0)
    n_tail_all = tl.maximum(nblk - tl.maximum(c_end, 1), 0)
    sink_units = tl.where(nblk > 0, POOL_COST, 0)
    units = sink_units + n_comp + POOL_COST * n_tail_all
    live = tl.minimum(num_splits, tl.maximum(tl.cdiv(units, MIN_SPLIT_UNITS), 1))
    per_split = tl.cdiv(units, live)
    return nblk, c_end, n_comp, n_tail_all, sink_units, per_split, live


@triton.jit
def _items_before(x, nblk, n_comp, n_tail_all):
    """How many pool items start before unit x of ``_shares``' line (see ``_share_of``)."""
    HALF: tl.constexpr = POOL_COST // 2
    n_items = tl.where(nblk > 0, 2 + 2 * n_tail_all, 0)
    sink = tl.where(x > 0, 1, 0) + tl.where(x > HALF, 1, 0)
    tail = tl.cdiv(tl.maximum(x - POOL_COST - n_comp, 0), HALF)
    return tl.minimum(sink + tail, n_items)


@triton.jit
def _share_of(split, nblk, n_comp, n_tail_all, sink_units, per_split, live):
    """What live split ``split`` reads, (start, end, k_lo, k_hi): the compressed blocks [start,
    end) and the pool items [k_lo, k_hi). Item 0 and 1 are the sink's halves, 2j and 2j + 1 tail
    block j's, on the line of ``_shares`` at units 0 and POOL_COST/2 (the sink) and sink + n_comp
    + POOL_COST/2·(k - 2) (the tail); a compressed block or an item is read by the split its unit
    falls in (the last live split takes what is past the end). At 2 units a split the sink's
    halves go to splits 0 and 1 and a tail block's to two neighbours, so no program reads a whole
    pool block alone."""
    u0 = split * per_split - sink_units
    start = 1 + tl.minimum(tl.maximum(u0, 0), n_comp)
    # (the last live split's end is 1 + n_comp: live x per_split covers every unit)
    end = 1 + tl.minimum(tl.maximum(u0 + per_split, 0), n_comp)
    # the items lie on the line in order (sink halves at 0 and HALF, tail halves from POOL_COST +
    # n_comp on, HALF apart), so a split's are those that start in [lo, hi): [before(lo), before(hi))
    k_lo = _items_before(split * per_split, nblk, n_comp, n_tail_all)
    k_hi = _items_before(
        tl.where(split == live - 1, 1 << 30, (split + 1) * per_split), nblk, n_comp, n_tail_all
    )
    return start, end, k_lo, k_hi
