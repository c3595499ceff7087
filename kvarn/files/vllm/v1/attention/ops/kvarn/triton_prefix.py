"""Multi-token queries over a cached prefix (chunked-prefill continuations, speculative
verification): one fused kernel over the compressed records and the fp16 pool, causal in the chunk.

A request's query tokens sit at positions ``seq_len - q_len .. seq_len - 1`` and every one of its
``seq_len`` tokens is already in the cache (the step wrote the chunk into the pool first). The
kernel is flash attention over that cache: a program owns a tile of BLOCK_M query rows of one KV
head, where a row is (token, query head of the group), so the GQA group shares each K/V tile and
2-16 speculative tokens of 8 heads fill the MMA's M side; it walks the keys BLOCK_N at a time
(BLOCK_N divides the block size G, so a tile lies in one block), reads a tile from the pool slot
when the block has one and otherwise dequantizes it from the record into fp16 registers
(``layout.py``: K̂[d,g] = (c·s_colK[d] + zpK[d])·s_rowK[g], V̂[g,d] = (c·s_rowV[g] + zpV[g])·s_colV[d]),
and keeps an online softmax in fp32. Nothing of the prefix is materialized in memory: the path it
replaces (``reference.gather_kv`` + SDPA per request) wrote the whole prefix out in fp32 first.

Split-K: a tile's keys may be cut into ``num_splits`` ranges (a batch of one request with four
speculative tokens is otherwise Hkv programs over 32K keys); each range writes its normalized O and
log2-sum-exp and torch combines them. The queries are rotated into the cache's basis before the
kernel and the output rotated back after it (H is its own inverse): one GEMM each, on the eager
path this kernel serves.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .layout import RecordLayout

LOG2E = 1.4426950408889634
BLOCK_N = 64
# Key tiles a split gets at least (fewer splits than the policy wants on short prefixes).
MIN_TILES_PER_SPLIT = 8


@triton.jit
def _f16(ptr):
    return ptr.to(tl.pointer_type(tl.float16))


@triton.jit
def _prefix_kernel(
    q_ptr,  # fp16 [T, Hq, D], rotated
    s_qt,
    s_qh,
    cache_ptr,  # uint8 [num_blocks, Hkv, REC]
    s_cb,
    s_ch,
    pk_ptr,  # fp16 [num_slots, G, Hkv, D]
    pv_ptr,
    s_ps,
    s_pg,
    s_ph,
    slot_ptr,  # int32 [num_blocks]: pool slot, -1 when compressed
    bt_ptr,  # int32 [R, W]
    s_bt,
    tile_req_ptr,  # int32 [num_tiles]: the request of a tile
    tile_row_ptr,  # int32 [num_tiles]: its first row (token · QPK + head)
    qsl_ptr,  # int32 [R + 1]
    seq_ptr,  # int32 [R]
    o_ptr,  # fp32 [splits, T, Hq, D]
    s_os,
    s_ot,
    s_oh,
    lse_ptr,  # fp32 [splits, T, Hq]
    s_ls,
    s_lt,
    scale_log2,
    num_splits,
    QPK: tl.constexpr,
    D: tl.constexpr,
    G: tl.constexpr,
    KB: tl.constexpr,
    VB: tl.constexpr,
    K_CODES: tl.constexpr,
    K_SCOL: tl.constexpr,
    K_ZP: tl.constexpr,
    K_SROW: tl.constexpr,
    V_CODES: tl.constexpr,
    V_SCOL: tl.constexpr,
    V_SROW: tl.constexpr,
    V_ZP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    tile = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    req = tl.load(tile_req_ptr + tile)
    row0 = tl.load(tile_row_ptr + tile)
    q_lo = tl.load(qsl_ptr + req)
    q_len = tl.load(qsl_ptr + req + 1) - q_lo
    past = tl.load(seq_ptr + req) - q_len

    rows = row0 + tl.arange(0, BLOCK_M)
    tok = rows // QPK
    head = kvh * QPK + rows % QPK
    live = tok < q_len
    qpos = past + tok  # a row sees keys 0..qpos
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(
        q_ptr + (q_lo + tok)[:, None] * s_qt + head[:, None] * s_qh + offs_d[None, :],
        mask=live[:, None],
        other=0.0,
    )

    # Keys this tile needs at all (its last live row's), then this split's share of them.
    kv_hi = past + tl.minimum((row0 + BLOCK_M - 1) // QPK, q_len - 1) + 1
    n_tiles = tl.cdiv(kv_hi, BLOCK_N)
    per = tl.cdiv(n_tiles, num_splits)
    start = split * per
    stop = tl.minimum(start + per, n_tiles)

    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    bt_row = bt_ptr + req * s_bt
    for n in range(start, stop):
        p0 = n * BLOCK_N
        off = p0 % G
        phys = tl.load(bt_row + p0 // G).to(tl.int64)
        slot = tl.load(slot_ptr + phys)
        kpos = p0 + offs_n
        kin = kpos < kv_hi
        if slot >= 0:
            base = slot.to(tl.int64) * s_ps + kvh * s_ph
            # Rows past seq_len may hold anything (NaN in the tests): masked on load.
            kt = tl.load(
                pk_ptr + base + (off + offs_n)[None, :] * s_pg + offs_d[:, None],
                mask=kin[None, :],
                other=0.0,
            )
            v = tl.load(
                pv_ptr + base + (off + offs_n)[:, None] * s_pg + offs_d[None, :],
                mask=kin[:, None],
                other=0.0,
            )
        else:
            rec = cache_ptr + phys * s_cb + kvh * s_ch
            g = off + offs_n
            kbyte = tl.load(
                rec + K_CODES + offs_d[:, None] * (G * KB // 8) + (g * KB // 8)[None, :]
            )
            kc = ((kbyte >> ((g * KB) % 8)[None, :].to(tl.uint8)) & ((1 << KB) - 1)).to(tl.float32)
            k_scol = tl.load(_f16(rec + K_SCOL) + offs_d).to(tl.float32)
            k_zp = tl.load(_f16(rec + K_ZP) + offs_d).to(tl.float32)
            k_srow = tl.load(_f16(rec + K_SROW) + g).to(tl.float32)
            kt = ((kc * k_scol[:, None] + k_zp[:, None]) * k_srow[None, :]).to(tl.float16)
            vbyte = tl.load(
                rec + V_CODES + g[:, None] * (D * VB // 8) + (offs_d * VB // 8)[None, :]
            )
            vc = ((vbyte >> ((offs_d * VB) % 8)[None, :].to(tl.uint8)) & ((1 << VB) - 1)).to(
                tl.float32
            )
            v_scol = tl.load(_f16(rec + V_SCOL) + offs_d).to(tl.float32)
            v_srow = tl.load(_f16(rec + V_SROW) + g).to(tl.float32)
            v_zp = tl.load(_f16(rec + V_ZP) + g).to(tl.float32)
            v = ((vc * v_srow[:, None] + v_zp[:, None]) * v_scol[None, :]).to(tl.float16)
        s = tl.dot(q, kt) * scale_log2
        s = tl.where(kpos[None, :] <= qpos[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new

    has = l_i > 0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    t_abs = q_lo + tok
    tl.store(
        o_ptr + split * s_os + t_abs[:, None] * s_ot + head[:, None] * s_oh + offs_d[None, :],
        o,
        mask=live[:, None],
    )
    tl.store(lse_ptr + split * s_ls + t_abs * s_lt + head, lse, mask=live)


def block_m_for(max_rows: int) -> int:
    """Rows a program takes: the MMA's 16 at least, 64 at most (registers at D = 256)."""
    return max(16, min(64, triton.next_power_of_2(max(1, max_rows))))


def prefix_tiles(
    qsl: list[int], requests: list[int], qpk: int, block_m: int
) -> tuple[list[int], list[int]]:
    """(request, first row) of every program tile, for the requests listed."""
    reqs: list[int] = []
    first: list[int] = []
    for i in requests:
        rows = (qsl[i + 1] - qsl[i]) * qpk
        for r in range(0, rows, block_m):
            reqs.append(i)
            first.append(r)
    return reqs, first


def choose_prefix_splits(programs: int, max_seq_len: int, sms: int) -> int:
    """Enough key ranges for about two programs per SM, each at least MIN_TILES_PER_SPLIT tiles."""
    if programs >= 2 * sms:
        return 1
    most = max(1, -(-max_seq_len // BLOCK_N) // MIN_TILES_PER_SPLIT)
    return max(1, min(most, -(-2 * sms // max(1, programs))))


def kvarn_prefix_attention(
    q: torch.Tensor,
    cache: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    block_slot: torch.Tensor,
    block_table: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    layout: RecordLayout,
    h16: torch.Tensor,
    scale: float,
    *,
    query_start_loc_cpu: list[int],
    requests: list[int] | None = None,
    max_seq_len: int,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Causal attention of every query token of ``requests`` over its request's cache; q [T, Hq, D]
    un-rotated. Returns fp32 [T, Hq, D], un-rotated; rows of other requests are left unwritten.

    ``query_start_loc`` int32 [R + 1] and ``seq_lens`` int32 [R] on the device (the token of row t
    of request i sits at position seq_lens[i] - q_len_i + t); ``query_start_loc_cpu`` is the same
    on the host (it sizes the grid, so the call reads nothing back); ``max_seq_len`` bounds
    seq_lens (it picks the split count only).
    """
    t, hq, d = q.shape
    hkv = cache.shape[1]
    if hq % hkv:
        raise ValueError(f"query heads {hq} are not a multiple of KV heads {hkv}")
    g = layout.group
    if g % BLOCK_N:
        raise ValueError(f"block size {g} is not a multiple of the key tile {BLOCK_N}")
    qpk = hq // hkv
    qsl = query_start_loc_cpu
    if requests is None:
        requests = list(range(len(qsl) - 1))
    out = torch.empty(t, hq, d, dtype=torch.float32, device=q.device)
    max_rows = max([0, *((qsl[i + 1] - qsl[i]) * qpk for i in requests)])
    if max_rows == 0:
        return out
    block_m = block_m_for(max_rows)
    reqs, first = prefix_tiles(qsl, requests, qpk, block_m)
    tiles = torch.tensor([reqs, first], dtype=torch.int32).to(q.device, non_blocking=True)
    if num_splits is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 1
        num_splits = choose_prefix_splits(len(reqs) * hkv, max_seq_len, sms)
    h = h16.float()
    q_rot = (q.float() @ h).to(torch.float16)
    o_part = torch.empty(num_splits, t, hq, d, dtype=torch.float32, device=q.device)
    lse = torch.empty(num_splits, t, hq, dtype=torch.float32, device=q.device)
    lay = layout
    pre = lay.preset
    _prefix_kernel[(len(reqs), hkv, num_splits)](
        q_rot,
        q_rot.stride(0),
        q_rot.stride(1),
        cache,
        cache.stride(0),
        cache.stride(1),
        pool_k,
        pool_v,
        pool_k.stride(0),
        pool_k.stride(1),
        pool_k.stride(2),
        block_slot,
        block_table,
        block_table.stride(0),
        tiles[0],
        tiles[1],
        query_start_loc,
        seq_lens,
        o_part,
        o_part.stride(0),
        o_part.stride(1),
        o_part.stride(2),
        lse,
        lse.stride(0),
        lse.stride(1),
        scale * LOG2E,
        num_splits,
        QPK=qpk,
        D=d,
        G=g,
        KB=pre.k_bits,
        VB=pre.v_bits,
        K_CODES=lay.k_codes,
        K_SCOL=lay.k_scol,
        K_ZP=lay.k_zp,
        K_SROW=lay.k_srow,
        V_CODES=lay.v_codes,
        V_SCOL=lay.v_scol,
        V_SROW=lay.v_srow,
        V_ZP=lay.v_zp,
        BLOCK_M=block_m,
        BLOCK_N=BLOCK_N,
        num_warps=8 if d > 128 else 4,
    )
    if num_splits == 1:
        o = o_part[0]
    else:
        # Splits a row's keys never reached hold lse = -inf: weight 0 (the first split always
        # holds key 0, so every row has a finite maximum).
        w = torch.softmax(lse * (1.0 / LOG2E), dim=0)
        o = (o_part * w[..., None]).sum(0)
    return torch.matmul(o, h, out=out)
