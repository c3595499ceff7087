"""Launch-shape probe for the decode: what the launch policy picks (warps per program, split count,
combine kind) against the launches around it, per row, on the synthetic caches of bench_decode.py.
It is how the policy in triton_decode.py was set (the table in kvarn/README.md is
bench_speedpath.py's, not this).

    python3 gpu/kvarn/probe_launch.py --out DIR [--quick] [--no-alt] [--d 128 --d 256]

Writes DIR/probe.json (one row per timed call, the parts alone, the compiled kernels' registers)
and DIR/probe.md (per row: the policy's launch, each kernel option of VARIANTS at it, and the
fastest launch tried). Every call is graph-captured and timed like the benchmark (do_bench median,
L2 cleared). --quick: a smoke run of this script on the CPU (Triton interpreter, tiny shapes);
--no-alt: the kernel options only; --d: one head size. The first call of each option compiles its
variants one at a time (minutes): `gpu/kvarn/precompile.py` fills Triton's cache in parallel first.
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

ROWS = [
    (1, 32768),
    (1, 131072),
    (8, 32768),
    (8, 131072),
    (32, 32768),
    (32, 131072),
    (128, 32768),
    (128, 131072),
]
# The launches run at the default KVARN_MAX_SPLITS (the 16-head combine's cost grows with it); a
# batch of one also tries 128 splits at WIDE.
WIDE = 128
# Kernel options timed at the policy's own launch ("policy" runs the module's defaults).
VARIANTS: dict[str, dict] = {
    "policy": {},
    "policy rot off": {"rotate_in_kernel": False},
    "policy rot on": {"rotate_in_kernel": True},
    "policy pf0": {"l2_prefetch": 0},
    "policy pf2": {"l2_prefetch": 2},
}


def _alternatives(d: int, b: int, policy: tuple[int, int, int], max_splits: int):
    """(warps, splits, heads, max_splits) tried beside the policy's own launch."""
    w, s, h = policy
    base = td.WARPS[d]
    near = {max(1, s // 2), s, min(max_splits, 2 * s)}
    if b >= 32:
        near |= {1, 2, 4, 8} if b >= 128 else {2, 4, 6, 8}
    out = {(ww, ss, hh, max_splits) for ww in (base, 2 * base) for ss in near for hh in (1, 16)}
    if b == 1:
        out |= {(ww, WIDE, 1, WIDE) for ww in (base, 2 * base)}
    out.discard((w, s, h, max_splits))
    return sorted(out)


def _run(case: bd.KVarNCase, cfg, warps, splits, heads, ws, **kw):
    return case.runner(cfg, td, ws, num_warps=warps, num_splits=splits, combine_heads=heads, **kw)


def _combine(case: bd.KVarNCase, hq: int, max_splits: int, splits: int, heads: int, ws):
    b, d = case.b, case.d
    part, lse = ws.get(b * splits, hq, d, case.q.device)
    res = torch.empty(b, hq, d, dtype=case.q.dtype, device=case.q.device)
    cargs = (part, *part.stride()[:2], lse, *lse.stride(), res, *res.stride()[:2], case.seq_lens,
             case.comp_end)  # fmt: skip
    h16, g = case.h16.contiguous(), case.lay.group

    def run():
        if heads == 1:
            jb = td.COMBINE_ROWS_PER_PROGRAM
            td._kvarn_combine_head_rot_kernel[(b, hq, d // jb)](
                *cargs, h16, splits, D=d, G=g, SPAD=max_splits, SC=min(max_splits, 8192 // d),
                JB=jb, num_warps=4,
            )  # fmt: skip
        else:
            td._kvarn_combine_rot_kernel[(b, -(-hq // 16))](
                *cargs, h16, hq, splits, D=d, G=g, SPAD=max_splits, HB=16, num_warps=4
            )

    return run


def _parts(case: bd.KVarNCase, hq: int, max_splits: int, splits: int, ws, emit) -> None:
    """The parts alone: an empty graph's replay (the timing floor), the rotation GEMM, each
    combine."""
    q2 = case.q.reshape(case.b * hq, case.d).float()
    h32 = case.h16.float()
    one = torch.zeros(1, device=case.q.device)
    key = dict(D=case.d, batch=case.b, ctx=case.ctx)
    emit(**key, part="one tiny kernel", us=bd.bench(lambda: one.add_(1.0)) * 1e6)
    t_rot = bd.bench(lambda: torch.addmm(q2, q2, h32, beta=0.0, alpha=0.1))
    emit(**key, part="q rotation", us=t_rot * 1e6)
    for hh in (1, 16):
        t = bd.bench(_combine(case, hq, max_splits, splits, hh, ws))
        emit(**key, part=f"combine heads={hh}", splits=splits, us=t * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="CPU interpreter smoke run, tiny shapes")
    ap.add_argument("--no-alt", action="store_true", help="the kernel options only, no neighbours")
    ap.add_argument("--d", type=int, action="append", help="head sizes to run (default: both)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cfg = config.KVarNConfig.from_env(os.environ)
    rows_spec = ROWS
    if args.quick:
        bd.DEV = "cpu"
        rows_spec = [(1, 512), (2, 512)]
    bw = 1e10 if bd.DEV == "cpu" else bd.copy_bandwidth()
    sms = td._num_sms(torch.device(bd.DEV))
    rows: list[dict] = []

    def emit(**row) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    for d, hq, hkv in bd.SHAPES:
        if args.d and d not in args.d:
            continue
        for b, ctx in rows_spec:
            t0 = time.time()
            case = bd.KVarNCase(b, ctx, d, hq, hkv)
            ws = td.DecodeWorkspace()
            nb = case.nb
            w = td.choose_warps(b, hkv, nb, sms, cfg, d) if bd.DEV != "cpu" else 4
            s = td.choose_splits(b, hkv, nb, sms, cfg, w)
            h = 1 if b * hq <= td.COMBINE_PER_HEAD_ROWS else 16
            ref = _run(case, cfg, None, 1, None, ws)().float()
            # the policy's launch with each kernel option (VARIANTS), then its neighbours
            tried = [(w, s, h, cfg.max_splits, kind) for kind in VARIANTS]
            if not (args.quick or args.no_alt):
                tried += [(*a, "alt") for a in _alternatives(d, b, (w, s, h), cfg.max_splits)]
            for ww, ss, hh, ms, kind in tried:
                pol = kind.startswith("policy")
                f = _run(
                    case,
                    dataclasses.replace(cfg, max_splits=ms),
                    None if pol else ww,
                    None if pol else ss,
                    None if pol else hh,
                    ws,
                    **VARIANTS.get(kind, {}),
                )
                cos = bd._cos(f(), ref)
                t = bd.bench(f)
                emit(
                    D=d,
                    batch=b,
                    ctx=ctx,
                    kind=kind,
                    warps=ww,
                    splits=ss,
                    heads=hh,
                    max_splits=ms,
                    us=t * 1e6,
                    frac_copy_bw=case.nbytes / t / bw,
                    cos_vs_single=cos,
                )
            _parts(case, hq, cfg.max_splits, s, ws, emit)
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
    opts = [k for k in VARIANTS if k != "policy"]
    lines = [
        "| D | batch | ctx | policy (warps/splits/heads) | µs | of copy BW | "
        + " | ".join(f"{k} µs" for k in opts)
        + " | fastest tried | µs |",
        "|---" * (8 + len(opts)) + "|",
    ]
    for k in sorted({(r["D"], r["batch"], r["ctx"]) for r in rows if "kind" in r}):
        timed = [r for r in rows if "kind" in r and (r["D"], r["batch"], r["ctx"]) == k]
        pol = next(r for r in timed if r["kind"] == "policy")
        us = {r["kind"]: r["us"] for r in timed if r["kind"] in VARIANTS}
        best = min(timed, key=lambda r: r["us"])
        tag = best["kind"].removeprefix("policy") if best["kind"] in VARIANTS else ""
        lines.append(
            f"| {k[0]} | {k[1]} | {k[2] // 1024}K | {pol['warps']}/{pol['splits']}/{pol['heads']} | "
            f"{pol['us']:.1f} | {pol['frac_copy_bw']:.1%} | "
            + " | ".join(f"{us[o]:.1f}" for o in opts)
            + f" | {best['warps']}/{best['splits']}/{best['heads']}{tag} (max {best['max_splits']})"
            f" | {best['us']:.1f} |"
        )
    with open(os.path.join(args.out, "probe.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
