"""The decode's launch policy, pure host arithmetic: how many splits and warps a step takes, how
many partial rows a caller reserves, how far ahead the word path prefetches into L2, and the
per-head-size tuning constants those choices read (measured runs cited beside each). No kernels
and no launches here (the ``decode_*`` modules hold the kernels, ``triton_decode`` binds and
launches them), so the store, the step and the backend ask it without importing either."""

from __future__ import annotations

import torch

from .config import KVarNConfig

# Warps per program of the word path (DEQ 3/4, the default) per head size on CUDA. Each tl.dot is
# spread over all warps of a program, and the word path's dots are small (N = 8 query heads, M =
# 32 tokens or 16-32 channel words), so more warps only replicate work: one warp does a D=128 block
# in ~1,650 SASS instructions, four warps in 4 x 1,155 (sm_90, offline compile; the byte path:
# 4 x 1,081); D=256 takes two warps (2 x ~1,510) where one spills. H200, run 8/9: at batch 128
# and 128K, 1 warp 65% of copy bandwidth at D=128 against 52% for 2; at batch 1, 2 warps were
# 1.3x faster (not taken: a batch-dependent warp count would compile a variant mid-serving).
WARPS: dict[int, int] = {128: 1, 256: 2}
# Warps of the decode kernel resident on one SM: every variant takes 255 registers a thread
# (uncapped; caps spill, see MAXNREG), so 65,536 / (256 x 32) = 8 (sm_90; n_regs from probe run 14).
RESIDENT_WARPS = 8
# choose_warps doubles the warps when the most programs a step can have fill at most this share
# of the resident slots, per head size. D=128: one warp spills more (Triton n_spills 312 against
# 40 for two), and 2 warps x 64 splits beat 1 x 128 at batch 1 and 128K (93 against 97 us);
# D=256: 2 x 128 beat 4 x 64 there (100 against 111 us; probe run 16, speedpath run 17).
FILL: dict[int, float] = {128: 1.0, 256: 0.5}
# Register cap (ptxas maxnreg) of the decode kernel per head size on CUDA; None: the compiler's
# choice. A cap trades spills for resident programs, which hide the latency of each program's
# serial block loop. Fixed per deployment (it is a compile option, so it never changes between
# steps); gpu/kvarn/bench_speedpath.py times the options. Word path, run 8: 168 and 128 spill in
# the hot loop and lose (40% and 27% of copy BW at D=128 batch 128 128K, against 65% uncapped).
MAXNREG: dict[int, int | None] = {128: None, 256: None}
# The byte path's caps (run 6/7: D=128 at 168, three 4-warp programs per SM, 1.1-1.4x uncapped).
MAXNREG_BYTES: dict[int, int | None] = {128: 168, 256: None}
# Word path on CUDA: how many compressed blocks ahead each program has its records moved into L2
# (sm_90 bulk prefetch, ``_l2_prefetch``); 0: none. Probe run 20 (q rotated by the GEMM), D=128:
# one block ahead was 4-12% faster on every row (batch 128 at 128K 66% -> 70% of copy bandwidth),
# two or four ahead slower from batch 8 on (5-14%, up to 40% at four: more bytes in flight than L2
# holds for them); run 21, with q rotated in the kernel: one ahead against none 0-13% faster at batch
# 1-8 for both head sizes (D=256 batch 8 at 128K: 321 -> 284 us).
L2_PREFETCH: dict[int, int] = {128: 1, 256: 1}


def l2_prefetch_blocks(device: torch.device, head_size: int, requested: int | None) -> int:
    """Blocks the word path prefetches into L2 ahead on ``device``: ``requested`` (None:
    ``L2_PREFETCH``) where the bulk prefetch exists, PTX ``cp.async.bulk.prefetch.L2`` on CUDA sm_90
    and later; 0 elsewhere (the interpreter, ROCm, an RTX 3090 or A100), where it is only a hint
    that costs nothing to drop."""
    if device.type != "cuda" or torch.version.hip:
        return 0
    if device not in _CAPABILITY:
        _CAPABILITY[device] = torch.cuda.get_device_capability(device)
    if _CAPABILITY[device][0] < 9:
        return 0
    return L2_PREFETCH.get(head_size, 0) if requested is None else max(0, requested)


_SMS: dict[torch.device, int] = {}
_CAPABILITY: dict[torch.device, tuple[int, int]] = {}


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    # asked once a device: torch's lookup is ~5 µs of host time a call (gpu/kvarn/probe_host.py)
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device]


def choose_splits(
    batch: int,
    num_kv_heads: int,
    max_blocks: int,
    num_sms: int,
    config: KVarNConfig,
    warps: int = 4,
) -> int:
    """Split count for a step: about one wave of resident programs (RESIDENT_WARPS / warps a
    SM), each split keeping at least 4 blocks; 1 (single stage) when split-K is off or there is
    nothing to split. More splits than fit at once only add programs that wait, each with its
    prologue, its epilogue and its share of the combine (probe runs 14-16)."""
    if not config.split_k or max_blocks <= 1:
        return 1
    if config.num_splits:
        return min(config.num_splits, config.max_splits)
    slots = num_sms * max(1, RESIDENT_WARPS // warps)
    want = slots // max(1, batch * num_kv_heads)
    by_len = max(1, max_blocks // 4)
    # a batch that fills the GPU alone still takes 2 splits where it can: D=256 batch 128 was
    # 4.6% faster at 128K with 2 than with 1, D=128 the same within 0.5% (probe run 16)
    return max(min(2, by_len, config.max_splits), min(want, by_len, config.max_splits))


def choose_warps(
    batch: int,
    num_kv_heads: int,
    max_blocks: int,
    num_sms: int,
    config: KVarNConfig,
    head_size: int,
) -> int:
    """Warps per program of the word path on CUDA: WARPS[head_size], or twice that when even the
    most splits fill no more than FILL[head_size] of the resident slots (a batch of one or two):
    then each program's blocks go faster, which the idle SMs cannot do. Both variants are compiled
    on the first call (``_Launch.compile_variants``), never mid-serving."""
    base = WARPS.get(head_size, 2)
    if not config.split_k or config.num_splits:
        return base
    most = batch * num_kv_heads * min(config.max_splits, max(1, max_blocks // 4))
    fill = FILL.get(head_size, 0.5) * num_sms * max(1, RESIDENT_WARPS // base)
    return 2 * base if most <= fill else base


def split_rows(
    max_batch: int, num_kv_heads: int, head_size: int, config: KVarNConfig, device: torch.device
) -> int:
    """The most partial rows (batch x splits) a step of up to ``max_batch`` requests takes under
    the launch policy, at any context length: what a caller reserves up front. (Keeping room for
    KVARN_MAX_SPLITS splits of every request took max_batch x max_splits rows: 268 MB at 256
    requests, 32 query heads, D = 128, 64 splits.)"""
    if not config.split_k:
        return 0
    sms = _num_sms(device)
    base = WARPS.get(head_size, 2) if device.type == "cuda" else 4
    most = 0
    for b in range(1, max_batch + 1):
        # base warps give the most slots, and no length cap: an upper bound on every step
        s = choose_splits(b, num_kv_heads, 1 << 30, sms, config, base)
        if s > 1:
            most = max(most, b * s)
    return most


def compressed_end_from_slots(
    block_slot: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor, group: int
) -> torch.Tensor:
    """comp_end [B] from the slot map: 1 + the number of leading compressed blocks after the sink.
    The backend's metadata builder computes it once a step for every layer (``KVarNMetadata.comp_end``)."""
    mb = block_table.shape[1]
    nblk = (seq_lens.long() + group - 1) // group
    idx = torch.arange(mb, device=block_table.device)
    comp = block_slot[block_table.long()] < 0
    comp &= (idx[None, :] >= 1) & (idx[None, :] < nblk[:, None])
    # first logical block >= 1 that is not compressed
    not_comp = (~comp) & (idx[None, :] >= 1)
    first = torch.where(not_comp, idx[None, :], torch.full_like(idx[None, :], mb)).amin(1)
    return torch.minimum(first, nblk.clamp_min(1)).to(torch.int32)
