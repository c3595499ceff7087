"""Before/after for the decode kernel's speed path, in one device run: the run-5 kernel (kept verbatim
in baseline/triton_decode_run5.py) and the current one on the same synthetic caches, against torch
SDPA on fp16 and the copy-bandwidth floor (the setup of bench_decode.py, whose case builder and timer
this reuses).

    python3 gpu/kvarn/bench_speedpath.py --out DIR [--batches 1,8,32,128] [--contexts 8192,32768,131072]
                                         [--warps 4] [--smoke]

Writes DIR/speedpath.json and DIR/speedpath.md. Each row also records the cosine between the two
kernels' outputs (same inputs), so a fast but wrong kernel shows up in the table itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path

import bench_decode as bd  # also loads kvarn_ops (through _load)
import torch
import triton
from kvarn_ops import config

HERE = Path(__file__).resolve().parent


def _load_baseline():
    spec = importlib.util.spec_from_file_location(
        "kvarn_ops.triton_decode_run5", HERE / "baseline/triton_decode_run5.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _runner(mod, case: bd.KVarNCase, cfg, warps: int):
    ws = mod.DecodeWorkspace()

    def run():
        return mod.kvarn_decode(
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
            workspace=ws,
            num_warps=warps,
        )

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--contexts", default="8192,32768,131072")
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--no-sdpa", action="store_true")
    ap.add_argument(
        "--maxnreg",
        default="128:168,128:128",
        help="register caps to time after the table, D:cap,... (new kernel, split-K cases)",
    )
    ap.add_argument("--variant-batches", default="1,8,32,128")
    ap.add_argument("--variant-contexts", default="32768,131072")
    ap.add_argument("--smoke", action="store_true", help="tiny run on the CPU (interpreter)")
    args = ap.parse_args()
    if args.smoke:
        bd.DEV = "cpu"
    from kvarn_ops import triton_decode as new

    old = _load_baseline()
    cfg = config.KVarNConfig.from_env(os.environ)
    if bd.DEV == "cpu":
        name, sms, bw = "cpu (interpreter smoke run)", 4, 1e10
    else:
        props = torch.cuda.get_device_properties(0)
        name, sms = props.name, props.multi_processor_count
        bw = bd.copy_bandwidth()
    meta = {
        "device": name,
        "sms": sms,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_bw_TBps": round(bw / 1e12, 3),
        "config": cfg.__dict__,
        "preset": bd.PRESET,
        "num_warps": args.warps,
    }
    print(json.dumps(meta), flush=True)
    rows = []
    for d, hq, hkv in bd.SHAPES:
        for b in map(int, args.batches.split(",")):
            for ctx in map(int, args.contexts.split(",")):
                t0 = time.time()
                case = bd.KVarNCase(b, ctx, d, hq, hkv)
                f_old = _runner(old, case, cfg, 4)
                f_new = _runner(new, case, cfg, args.warps)
                cos = bd._cos(f_new(), f_old())
                t_old = bd.bench(f_old)
                t_new = bd.bench(f_new)
                nbytes, splits = case.nbytes, case.splits(cfg)
                del case, f_old, f_new
                if bd.DEV != "cpu":
                    torch.cuda.empty_cache()
                ts = None if args.no_sdpa else bd.sdpa_time(b, ctx, d, hq, hkv)
                if bd.DEV != "cpu":
                    torch.cuda.empty_cache()
                row = {
                    "D": d,
                    "Hq": hq,
                    "Hkv": hkv,
                    "batch": b,
                    "ctx": ctx,
                    "splits": splits,
                    "old_us": t_old * 1e6,
                    "new_us": t_new * 1e6,
                    "new_vs_old": t_old / t_new,
                    "sdpa_fp16_us": None if ts is None else ts * 1e6,
                    "new_vs_fp16": None if ts is None else ts / t_new,
                    "old_vs_fp16": None if ts is None else ts / t_old,
                    "kvarn_MB": nbytes / 1e6,
                    "new_TBps": nbytes / t_new / 1e12,
                    "new_frac_copy_bw": nbytes / t_new / bw,
                    "old_frac_copy_bw": nbytes / t_old / bw,
                    "floor_kvarn_us": nbytes / bw * 1e6,
                    "cos_new_old": cos,
                    "wall_s": round(time.time() - t0, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    variants = []
    for spec in filter(None, args.maxnreg.split(",")):
        d_s, cap_s = spec.split(":")
        d, cap = int(d_s), int(cap_s)
        hq, hkv = next((h, k) for dd, h, k in bd.SHAPES if dd == d)
        saved = new.MAXNREG.get(d)
        new.MAXNREG[d] = cap
        for b in map(int, args.variant_batches.split(",")):
            for ctx in map(int, args.variant_contexts.split(",")):
                case = bd.KVarNCase(b, ctx, d, hq, hkv)
                f_old = _runner(old, case, cfg, 4)
                f_cap = _runner(new, case, cfg, args.warps)
                cos = bd._cos(f_cap(), f_old())
                t_cap = bd.bench(f_cap)
                row = {
                    "D": d,
                    "batch": b,
                    "ctx": ctx,
                    "maxnreg": cap,
                    "us": t_cap * 1e6,
                    "frac_copy_bw": case.nbytes / t_cap / bw,
                    "cos_vs_old": cos,
                }
                del case, f_old, f_cap
                if bd.DEV != "cpu":
                    torch.cuda.empty_cache()
                variants.append(row)
                print(json.dumps(row), flush=True)
        new.MAXNREG[d] = saved
    with open(os.path.join(args.out, "speedpath.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "maxnreg_variants": variants}, f, indent=1)
    lines = [
        f"{meta['device']}, {meta['sms']} SMs, torch {meta['torch']}, Triton {meta['triton']}; "
        f"measured copy bandwidth {meta['copy_bw_TBps']} TB/s (read + write); preset {bd.PRESET}; "
        f"new kernel num_warps={args.warps}",
        "",
        "| D | Hq/Hkv | batch | ctx | splits | run-5 µs | new µs | new/run-5 | SDPA fp16 µs | "
        "new vs fp16 | new TB/s | of copy BW (run 5) | cos(new, run 5) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sd = "-" if r["sdpa_fp16_us"] is None else f"{r['sdpa_fp16_us']:.1f}"
        sp = "-" if r["new_vs_fp16"] is None else f"{r['new_vs_fp16']:.2f}×"
        lines.append(
            f"| {r['D']} | {r['Hq']}/{r['Hkv']} | {r['batch']} | {r['ctx'] // 1024}K | "
            f"{r['splits']} | {r['old_us']:.1f} | {r['new_us']:.1f} | {r['new_vs_old']:.2f}× | "
            f"{sd} | {sp} | {r['new_TBps']:.2f} | {r['new_frac_copy_bw']:.0%} "
            f"({r['old_frac_copy_bw']:.0%}) | {r['cos_new_old']:.6f} |"
        )
    if variants:
        lines += ["", "| D | batch | ctx | maxnreg | new µs | of copy BW | cos(new, run 5) |"]
        lines.append("|---|---|---|---|---|---|---|")
        for v in variants:
            lines.append(
                f"| {v['D']} | {v['batch']} | {v['ctx'] // 1024}K | {v['maxnreg']} | "
                f"{v['us']:.1f} | {v['frac_copy_bw']:.0%} | {v['cos_vs_old']:.6f} |"
            )
    with open(os.path.join(args.out, "speedpath.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
