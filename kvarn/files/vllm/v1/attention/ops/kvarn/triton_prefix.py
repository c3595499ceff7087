"""Multi-token queries over a cached prefix (chunked-prefill continuations, speculative
verification), read straight from the compressed records and the fp16 pool, causal in the chunk.

A request's query tokens sit at positions ``seq_len - q_len .. seq_len - 1`` and every one of its
``seq_len`` tokens is already in the cache (the step wrote the chunk into the pool first). Two ways,
picked per request by its query length (``FUSED_MAX_TOKENS``):

- **one pass** (``_prefix_kernel``, 2-16 speculative tokens): flash attention over the cache. A
  program owns a tile of BLOCK_M query rows of one KV head, a row being (token, query head of the
  group), so the GQA group shares each K/V tile and 2-16 tokens of 4-8 heads fill the MMA's M
  side; it walks the keys BLOCK_N at a time (BLOCK_N divides the block size G, so a tile lies in
  one block), reads a tile from the block's pool slot or dequantizes it from the record into fp16
  registers (``_kv_tile``; ``layout.py``: K̂[d,g] = (c·s_colK[d] + zpK[d])·s_rowK[g],
  V̂[g,d] = (c·s_rowV[g] + zpV[g])·s_colV[d]), and keeps an online softmax in fp32. Split-K cuts
  the keys into ranges when the tiles alone leave the GPU idle (one request, 4 tokens: Hkv
  programs over 32K keys); ``_combine_kernel`` weighs the ranges by their log2-sum-exp.
- **dequantize once** (``_dequant_kernel`` + SDPA, prefill chunks): a program of the one-pass
  kernel dequantizes every key tile it reads, so a 2,048-token chunk (128 query tiles a head)
  would dequantize its prefix 128 times; instead the prefix is written once as fp16 (head-major,
  rotated basis; 134 MB at 32K x 8 heads x 128) and SDPA's flash kernel attends with the causal
  mask aligned to the end (``causal_lower_right``).

Either replaces the path the backend had (``reference.gather_kv`` in fp32 through torch ops, then
SDPA with a boolean mask per request). The queries are rotated into the cache's basis before and
the output rotated back after (H is its own inverse): one GEMM each, on the eager path this serves.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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
def _kv_tile(
    cache_ptr, s_cb, s_ch, pk_ptr, pv_ptr, s_ps, s_pg, s_ph, phys, slot, kvh, off, kin, offs_n,
    offs_d, D: tl.constexpr, G: tl.constexpr, KB: tl.constexpr, VB: tl.constexpr,
    K_CODES: tl.constexpr, K_SCOL: tl.constexpr, K_ZP: tl.constexpr, K_SROW: tl.constexpr,
    V_CODES: tl.constexpr, V_SCOL: tl.constexpr, V_SROW: tl.constexpr, V_ZP: tl.constexpr,
):  # fmt: skip
    """K^T [D, BLOCK_N] and V [BLOCK_N, D] fp16 (rotated basis) of the key tile at row ``off`` of
    block ``phys``: from its pool slot, or dequantized from its record. Keys outside ``kin`` are
    0 when read from the pool (rows past seq_len may hold anything)."""
    if slot >= 0:
        base = slot.to(tl.int64) * s_ps + kvh * s_ph
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
        kbyte = tl.load(rec + K_CODES + offs_d[:, None] * (G * KB // 8) + (g * KB // 8)[None, :])
        kc = ((kbyte >> ((g * KB) % 8)[None, :].to(tl.uint8)) & ((1 << KB) - 1)).to(tl.float32)
        k_scol = tl.load(_f16(rec + K_SCOL) + offs_d).to(tl.float32)
        k_zp = tl.load(_f16(rec + K_ZP) + offs_d).to(tl.float32)
        k_srow = tl.load(_f16(rec + K_SROW) + g).to(tl.float32)
        kt = ((kc * k_scol[:, None] + k_zp[:, None]) * k_srow[None, :]).to(tl.float16)
        vbyte = tl.load(rec + V_CODES + g[:, None] * (D * VB // 8) + (offs_d * VB // 8)[None, :])
        vc = ((vbyte >> ((offs_d * VB) % 8)[None, :].to(tl.uint8)) & ((1 << VB) - 1)).to(tl.float32)
        v_scol = tl.load(_f16(rec + V_SCOL) + offs_d).to(tl.float32)
        v_srow = tl.load(_f16(rec + V_SROW) + g).to(tl.float32)
        v_zp = tl.load(_f16(rec + V_ZP) + g).to(tl.float32)
        v = ((vc * v_srow[:, None] + v_zp[:, None]) * v_scol[None, :]).to(tl.float16)
    return kt, v


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
    o_ptr,  # fp32 [T, Hq, D]; with IS_SPLIT [splits, tiles · Hkv, BLOCK_M, D]
    s_ot,
    s_oh,
    lse_ptr,  # fp32 [splits, tiles · Hkv, BLOCK_M] (IS_SPLIT)
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
    IS_SPLIT: tl.constexpr,
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
        kt, v = _kv_tile(
            cache_ptr, s_cb, s_ch, pk_ptr, pv_ptr, s_ps, s_pg, s_ph, phys, slot, kvh, off, kin,
            offs_n, offs_d, D, G, KB, VB, K_CODES, K_SCOL, K_ZP, K_SROW, V_CODES, V_SCOL, V_SROW,
            V_ZP,
        )  # fmt: skip
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
    if IS_SPLIT:
        # Partials by (split, program, tile row); _combine_kernel puts the rows where they go.
        part = split * tl.num_programs(0) * tl.num_programs(1) + tile * tl.num_programs(1) + kvh
        r = part.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        tl.store(o_ptr + r[:, None] * D + offs_d[None, :], o)
        tl.store(lse_ptr + r, tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), -float("inf")))
    else:
        t_abs = q_lo + tok
        tl.store(
            o_ptr + t_abs[:, None] * s_ot + head[:, None] * s_oh + offs_d[None, :],
            o,
            mask=live[:, None],
        )


@triton.jit
def _combine_kernel(
    part_ptr,  # fp32 [splits, tiles · Hkv, BLOCK_M, D]
    lse_ptr,  # fp32 [splits, tiles · Hkv, BLOCK_M]
    tile_req_ptr,
    tile_row_ptr,
    qsl_ptr,
    o_ptr,  # fp32 [T, Hq, D]
    s_ot,
    s_oh,
    num_splits,
    QPK: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """The key ranges of one program's rows, weighted by their log2-sum-exp. A range that reached
    no key of a row holds -inf (weight 0); the first range always holds key 0."""
    tile = tl.program_id(0)
    kvh = tl.program_id(1)
    req = tl.load(tile_req_ptr + tile)
    row0 = tl.load(tile_row_ptr + tile)
    q_lo = tl.load(qsl_ptr + req)
    q_len = tl.load(qsl_ptr + req + 1) - q_lo
    rows = row0 + tl.arange(0, BLOCK_M)
    tok = rows // QPK
    head = kvh * QPK + rows % QPK
    live = tok < q_len
    offs_d = tl.arange(0, D)
    per_split = tl.num_programs(0) * tl.num_programs(1)
    me = tile * tl.num_programs(1) + kvh
    m = tl.full([BLOCK_M], -float("inf"), tl.float32)
    for s in range(num_splits):
        r = (s * per_split + me).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        m = tl.maximum(m, tl.load(lse_ptr + r))
    m = tl.where(m == -float("inf"), 0.0, m)  # a row no range reached (padding): output 0
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    den = tl.zeros([BLOCK_M], tl.float32)
    for s in range(num_splits):
        r = (s * per_split + me).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        w = tl.exp2(tl.load(lse_ptr + r) - m)
        den += w
        acc += w[:, None] * tl.load(part_ptr + r[:, None] * D + offs_d[None, :])
    o = acc / tl.where(den > 0, den, 1.0)[:, None]
    t_abs = q_lo + tok
    tl.store(
        o_ptr + t_abs[:, None] * s_ot + head[:, None] * s_oh + offs_d[None, :],
        o,
        mask=live[:, None],
    )


@triton.jit
def _dequant_kernel(
    cache_ptr, s_cb, s_ch, pk_ptr, pv_ptr, s_ps, s_pg, s_ph, slot_ptr, bt_row_ptr, seq_len,
    k_out, v_out, s_oh,  # fp16 [Hkv, L, D]
    D: tl.constexpr, G: tl.constexpr, KB: tl.constexpr, VB: tl.constexpr,
    K_CODES: tl.constexpr, K_SCOL: tl.constexpr, K_ZP: tl.constexpr, K_SROW: tl.constexpr,
    V_CODES: tl.constexpr, V_SCOL: tl.constexpr, V_SROW: tl.constexpr, V_ZP: tl.constexpr,
    BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One request's first ``seq_len`` keys and values, fp16 in the rotated basis, head-major."""
    n = tl.program_id(0)
    kvh = tl.program_id(1)
    p0 = n * BLOCK_N
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    phys = tl.load(bt_row_ptr + p0 // G).to(tl.int64)
    slot = tl.load(slot_ptr + phys)
    kin = p0 + offs_n < seq_len
    kt, v = _kv_tile(
        cache_ptr, s_cb, s_ch, pk_ptr, pv_ptr, s_ps, s_pg, s_ph, phys, slot, kvh, p0 % G, kin,
        offs_n, offs_d, D, G, KB, VB, K_CODES, K_SCOL, K_ZP, K_SROW, V_CODES, V_SCOL, V_SROW, V_ZP,
    )  # fmt: skip
    row = kvh.to(tl.int64) * s_oh + (p0 + offs_n) * D
    tl.store(k_out + row[None, :] + offs_d[:, None], kt, mask=kin[None, :])
    tl.store(v_out + row[:, None] + offs_d[None, :], v, mask=kin[:, None])


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
    seq_lens_cpu: list[int],
    requests: list[int] | None = None,
    num_splits: int | None = None,
    path: str = "auto",
) -> torch.Tensor:
    """Causal attention of every query token of ``requests`` over its request's cache; q [T, Hq, D]
    un-rotated. Returns fp32 [T, Hq, D], un-rotated; rows of other requests are undefined.

    ``query_start_loc`` int32 [R + 1] and ``seq_lens`` int32 [R] on the device (the token of row t
    of request i sits at position seq_lens[i] - q_len_i + t); ``query_start_loc_cpu`` and
    ``seq_lens_cpu`` are the same on the host (they size the launches: nothing is read back).

    ``path``: "fused" runs the one-pass kernel for every request, "dense" dequantizes each
    request's prefix once and runs SDPA over it, "auto" (the default) takes the fused kernel for
    up to FUSED_MAX_TOKENS query tokens and the dense path above.
    """
    t, hq, d = q.shape
    hkv = cache.shape[1]
    if hq % hkv:
        raise ValueError(f"query heads {hq} are not a multiple of KV heads {hkv}")
    if layout.group % BLOCK_N:
        raise ValueError(f"block size {layout.group} is not a multiple of the key tile {BLOCK_N}")
    if path not in ("auto", "fused", "dense"):
        raise ValueError(f"path {path!r}: choose auto, fused or dense")
    qsl = query_start_loc_cpu
    if requests is None:
        requests = list(range(len(qsl) - 1))
    requests = [i for i in requests if qsl[i + 1] > qsl[i]]
    out = torch.empty(t, hq, d, dtype=torch.float32, device=q.device)
    if not requests:
        return out
    h = h16.float()
    q_rot = (q.float() @ h).to(torch.float16)
    o = torch.empty(t, hq, d, dtype=torch.float32, device=q.device)
    fused = [
        i
        for i in requests
        if path == "fused" or (path == "auto" and qsl[i + 1] - qsl[i] <= FUSED_MAX_TOKENS)
    ]
    if fused:
        _fused(q_rot, cache, pool_k, pool_v, block_slot, block_table, query_start_loc, seq_lens,
               layout, scale, qsl, seq_lens_cpu, fused, num_splits, o)  # fmt: skip
    done = set(fused)
    for i in requests:
        if i not in done:
            _dense(q_rot, cache, pool_k, pool_v, block_slot, block_table, layout, scale,
                   qsl[i], qsl[i + 1], seq_lens_cpu[i], i, o)  # fmt: skip
    return torch.matmul(o, h, out=out)


# Query tokens up to which "auto" takes the one-pass kernel. Its programs each dequantize every key
# tile they read, so a request of many query tiles dequantizes its prefix once per tile; from 32
# tokens on (two tiles of 4 heads), dequantizing once into fp16 and running SDPA was faster on
# every row (bench_prefix.py, run 36), up to 16 the one pass on most.
FUSED_MAX_TOKENS = 16


def _fused(q_rot, cache, pool_k, pool_v, block_slot, block_table, query_start_loc, seq_lens,
           layout, scale, qsl, seq_lens_cpu, requests, num_splits, o) -> None:  # fmt: skip
    hkv = cache.shape[1]
    qpk = q_rot.shape[1] // hkv
    block_m = block_m_for(max((qsl[i + 1] - qsl[i]) * qpk for i in requests))
    reqs, first = prefix_tiles(qsl, requests, qpk, block_m)
    tiles = torch.tensor([reqs, first], dtype=torch.int32).to(q_rot.device, non_blocking=True)
    if num_splits is None:
        longest = max(seq_lens_cpu[i] for i in requests)
        num_splits = choose_prefix_splits(len(reqs) * hkv, longest, _num_sms(q_rot.device))
    _one_pass(q_rot, cache, pool_k, pool_v, block_slot, block_table, query_start_loc, seq_lens,
              layout, scale, tiles, block_m, num_splits, o)  # fmt: skip


def _one_pass(q_rot, cache, pool_k, pool_v, block_slot, block_table, query_start_loc, seq_lens,
              layout, scale, tiles, block_m, num_splits, o) -> None:  # fmt: skip
    """The one-pass kernel over the program tiles ``tiles`` (int32 [2, n]: request, first row),
    into ``o``; with splits, their combine. Reads nothing back to the host."""
    hq, d = q_rot.shape[1:]
    hkv = cache.shape[1]
    qpk = hq // hkv
    n_tiles = tiles.shape[1]
    split = num_splits > 1
    if split:
        rows = num_splits * n_tiles * hkv * block_m
        part = torch.empty(rows, d, dtype=torch.float32, device=o.device)
        lse = torch.empty(rows, dtype=torch.float32, device=o.device)
    else:
        part, lse = o, o  # written in place; lse unused
    grid = (n_tiles, hkv)
    _prefix_kernel[(*grid, num_splits)](
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
        part,
        o.stride(0),
        o.stride(1),
        lse,
        scale * LOG2E,
        num_splits,
        QPK=qpk,
        BLOCK_M=block_m,
        BLOCK_N=BLOCK_N,
        IS_SPLIT=split,
        num_warps=8 if d > 128 else 4,
        **layout.constexprs(),
    )
    if split:
        _combine_kernel[grid](
            part,
            lse,
            tiles[0],
            tiles[1],
            query_start_loc,
            o,
            o.stride(0),
            o.stride(1),
            num_splits,
            QPK=qpk,
            D=d,
            BLOCK_M=block_m,
            num_warps=4,
        )


_UNIFORM_TILES: dict[tuple, torch.Tensor] = {}


def uniform_prefix_attention(
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
    q_len: int,
    max_model_len: int,
) -> torch.Tensor:
    """``kvarn_prefix_attention`` for a batch in which every request has ``q_len`` query tokens
    (speculative verification: 1 + k), with nothing read from the host and every size fixed by the
    batch and ``max_model_len``: the program tiles are made once per shape, the split count is the
    policy's for the longest context. So it can be captured in a CUDA graph and replayed at any
    length. A request of sequence length 0 (padding in a graph's batch) comes out as zeros.
    Returns [T, Hq, D] in q's dtype, un-rotated."""
    t, hq, d = q.shape
    hkv = cache.shape[1]
    if q_len < 1 or t % q_len or q_len > FUSED_MAX_TOKENS:
        raise ValueError(f"{t} query tokens are not requests of {q_len} (1..{FUSED_MAX_TOKENS})")
    qpk = hq // hkv
    block_m = block_m_for(q_len * qpk)
    key = (q.device, t // q_len, q_len, qpk)
    tiles = _UNIFORM_TILES.get(key)
    if tiles is None:
        qsl = list(range(0, t + 1, q_len))
        reqs, first = prefix_tiles(qsl, list(range(t // q_len)), qpk, block_m)
        tiles = _UNIFORM_TILES[key] = torch.tensor(
            [reqs, first], dtype=torch.int32, device=q.device
        )
    num_splits = choose_prefix_splits(tiles.shape[1] * hkv, max_model_len, _num_sms(q.device))
    h = h16.float()
    q_rot = (q.float() @ h).to(torch.float16)
    o = torch.empty(t, hq, d, dtype=torch.float32, device=q.device)
    _one_pass(q_rot, cache, pool_k, pool_v, block_slot, block_table, query_start_loc, seq_lens,
              layout, scale, tiles, block_m, num_splits, o)  # fmt: skip
    return (o @ h).to(q.dtype)


_SMS: dict[torch.device, int] = {}


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device]


def _dense(q_rot, cache, pool_k, pool_v, block_slot, block_table, layout, scale, lo, hi,
           seq_len, i, o) -> None:  # fmt: skip
    """One request: its prefix dequantized once into fp16 (head-major), then SDPA with the causal
    mask aligned to the end (the chunk's last token sees every key)."""
    from torch.nn.attention.bias import causal_lower_right

    hkv, d = cache.shape[1], layout.head_dim
    k = torch.empty(hkv, seq_len, d, dtype=torch.float16, device=o.device)
    v = torch.empty_like(k)
    _dequant_kernel[(triton.cdiv(seq_len, BLOCK_N), hkv)](
        cache,
        cache.stride(0),
        cache.stride(1),
        pool_k,
        pool_v,
        pool_k.stride(0),
        pool_k.stride(1),
        pool_k.stride(2),
        block_slot,
        block_table[i],
        seq_len,
        k,
        v,
        k.stride(0),
        BLOCK_N=BLOCK_N,
        num_warps=8 if d > 128 else 4,
        **layout.constexprs(),
    )
    q = q_rot[lo:hi].transpose(0, 1)[None]  # [1, Hq, Lq, D]
    if not q.is_cuda:
        q, k, v = q.float(), k.float(), v.float()  # the CPU's SDPA (tests)
    res = F.scaled_dot_product_attention(
        q,
        k[None],
        v[None],
        attn_mask=causal_lower_right(hi - lo, seq_len),
        scale=scale,
        enable_gqa=hkv != q.shape[1],
    )
    o[lo:hi] = res[0].transpose(0, 1).float()
