"""Launch-shape probe for the decode: warps per program x split count x combine kind, per row, on
the synthetic caches of bench_decode.py. It answers what the split/warps policy should pick (the
table in kvarn/README.md is bench_speedpath.py's, not this).

    python3 gpu/kvarn/probe_launch.py --out DIR [--quick]

Writes DIR/probe.json (one row per timed call) and DIR/probe.md (the fastest launch per row and
the time of each part alone: q rotation, stage 1, combine). Every call is graph-captured and timed
like the benchmark (do_bench median, L2 cleared).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import bench_decode as bd  # also loads kvarn_ops (through _load)
import torch
from kvarn_ops import config
from kvarn_ops import triton_decode as td

MAX_SPLITS = 256
SMALL = {  # (batch, ctx) -> splits tried; latency-bound rows
    (1, 32768): (16, 32, 64, 128, 256),
    (1, 131072): (32, 64, 128, 256),
    (8, 32768): (16, 32, 64),
    (8, 131072): (16, 32, 64, 128),
}
LARGE = {  # bandwidth-bound rows: wave quantization
    (32, 32768): (8, 12, 16, 17, 20, 24, 33),
    (32, 131072): (8, 12, 16, 17, 24, 33),
    (128, 32768): (2, 3, 4, 5, 8),
}
WARPS = {128: (1, 2, 4), 256: (2, 4)}


def _run(case: bd.KVarNCase, cfg, warps: int, splits: int, heads: int, ws):
    def run():
        return td.kvarn_decode(
            case.q,
            case.cache,
            case.pool_k,
            case.pool_v,
            case.slot,
            case.table,
            case.seq_lens,
            case.lay,
            case.h16,
            case.d**-0.5,
            cfg,
            comp_end=case.comp_end,
            max_seq_len=case.ctx,
            num_splits=splits,
            workspace=ws,
            num_warps=warps,
            combine_heads=heads,
        )

    return run


def _combine(case: bd.KVarNCase, hq: int, splits: int, heads: int, ws):
    b, d = case.b, case.d
    part, lse = ws.get(b, hq, MAX_SPLITS, d, case.q.device)
    res = torch.empty(b, hq, d, dtype=case.q.dtype, device=case.q.device)
    cargs = (part, *part.stride()[:3], lse, *lse.stride()[:2], res, *res.stride()[:2])
    h16 = case.h16.contiguous()

    def run():
        if heads == 1:
            td._kvarn_combine_head_rot_kernel[(b, hq)](
                *cargs, h16, splits, D=d, SPAD=MAX_SPLITS, SC=16, num_warps=4
            )
        else:
            td._kvarn_combine_rot_kernel[(b, -(-hq // 16))](
                *cargs, h16, hq, splits, D=d, SPAD=MAX_SPLITS, HB=16, num_warps=4
            )

    return run


def _parts(case: bd.KVarNCase, hq: int, split_list, heads_list, ws, emit) -> None:
    """The parts alone: the rotation GEMM and each combine."""
    q2 = case.q.reshape(case.b * hq, case.d).float()
    h32 = case.h16.float()
    t_rot = bd.bench(lambda: torch.addmm(q2, q2, h32, beta=0.0, alpha=0.1))
    key = dict(D=case.d, batch=case.b, ctx=case.ctx)
    emit(**key, part="q rotation", us=t_rot * 1e6)
    for s in split_list:
        for hh in heads_list:
            t = bd.bench(_combine(case, hq, s, hh, ws))
            emit(**key, part=f"combine heads={hh}", splits=s, us=t * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="CPU interpreter smoke run, tiny shapes")
    args = ap.parse_args()
    cfg = dataclasses.replace(config.KVarNConfig.from_env(os.environ), max_splits=MAX_SPLITS)
    small, large = SMALL, LARGE
    if args.quick:
        bd.DEV = "cpu"
        small, large = {(1, 512): (2, 4)}, {(2, 512): (2,)}
    bw = 1e10 if bd.DEV == "cpu" else bd.copy_bandwidth()
    rows: list[dict] = []

    def emit(**row) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    for d, hq, hkv in bd.SHAPES:
        for (b, ctx), split_list in {**small, **large}.items():
            t0 = time.time()
            case = bd.KVarNCase(b, ctx, d, hq, hkv)
            ws = td.DecodeWorkspace()
            ref = _run(case, cfg, td.WARPS.get(d, 2), 1, 16, ws)().float()
            heads_list = (1, 16) if (b, ctx) in small else (16,)
            warps_list = WARPS[d] if (b, ctx) in small else (td.WARPS[d],)
            if args.quick:
                warps_list = (4,)
            for w in warps_list:
                for s in split_list:
                    for hh in heads_list:
                        f = _run(case, cfg, w, s, hh, ws)
                        cos = bd._cos(f(), ref)
                        t = bd.bench(f)
                        emit(
                            D=d,
                            batch=b,
                            ctx=ctx,
                            warps=w,
                            splits=s,
                            heads=hh,
                            us=t * 1e6,
                            frac_copy_bw=case.nbytes / t / bw,
                            cos_vs_single=cos,
                        )
            _parts(case, hq, split_list[-2:], heads_list, ws, emit)
            del case, ws
            if bd.DEV != "cpu":
                torch.cuda.empty_cache()
            print(f"# D={d} b={b} ctx={ctx}: {time.time() - t0:.0f} s", flush=True)
    for name in (
        "_kvarn_decode_kernel",
        "_kvarn_combine_head_rot_kernel",
        "_kvarn_combine_rot_kernel",
    ):
        for cache in getattr(getattr(td, name), "device_caches", {}).values():
            for k in cache[0].values():
                emit(
                    kernel=name,
                    num_warps=k.metadata.num_warps,
                    n_regs=k.n_regs,
                    n_spills=k.n_spills,
                    shared=k.metadata.shared,
                )
    with open(os.path.join(args.out, "probe.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    lines = [
        "| D | batch | ctx | best launch (warps/splits/heads) | µs | of copy BW | default-warps best µs |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["D"], r["batch"], r["ctx"]) for r in rows})
    for k in keys:
        timed = [r for r in rows if (r["D"], r["batch"], r["ctx"]) == k and "warps" in r]
        best = min(timed, key=lambda r: r["us"])
        dflt = min(
            (r for r in timed if r["warps"] == td.WARPS[k[0]]), key=lambda r: r["us"], default=best
        )
        lines.append(
            f"| {k[0]} | {k[1]} | {k[2] // 1024}K | {best['warps']}/{best['splits']}/"
            f"{best['heads']} | {best['us']:.1f} | {best['frac_copy_bw']:.1%} | "
            f"{dflt['us']:.1f} ({dflt['splits']}/{dflt['heads']}) |"
        )
    with open(os.path.join(args.out, "probe.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
