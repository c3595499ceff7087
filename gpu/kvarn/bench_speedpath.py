"""Before/after for the decode kernel's speed path, in one device run: a past kernel (taken from git
history by commit, ``--baseline FILE``) and the current one on the same synthetic caches, against an
fp8 (e4m3) KV-cache Triton decode (fp8_decode.py, the fastest of a few tile orientations / warp /
stage counts per row), torch SDPA on fp16 (folded; bench_serving.py has SDPA's GQA path and eager
timings), and the copy-bandwidth floors of the compressed and the fp8 bytes (the setup of
bench_decode.py, whose case builder and timer this reuses).

    python3 gpu/kvarn/bench_speedpath.py --out DIR [--baseline FILE] [--batches 1,8,32,128]
        [--contexts 8192,32768,131072] [--variants D:warps:maxnreg:splitx,...] [--smoke]

The run-7 kernel, the baseline of runs 12-22, is the file at commit d9dcd90; the device gets no git
history, so take it out first into the ignored build/ and carry that:

    mkdir -p build/kvarn-baseline
    git show d9dcd90:gpu/kvarn/baseline/triton_decode_run7.py > build/kvarn-baseline/run7.py
    BENCH_ARGS="--baseline build/kvarn-baseline/run7.py" bash gpu/kvarn/run_speedpath.sh  # carry build/kvarn-baseline

Writes DIR/speedpath.json and DIR/speedpath.md. With a baseline, each row also records the cosine
between the new and the baseline's outputs (same inputs), so a fast but wrong kernel shows up in the
table itself; the fp8 kernel is checked against SDPA on its dequantized cache once at the start.
Without one, the baseline columns are empty and the variants compare with the current kernel.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import time
from pathlib import Path

import bench_decode as bd  # also loads kvarn_ops (through _load)
import fp8_decode
import torch
import triton
from kvarn_ops import config

HERE = Path(__file__).resolve().parent
# fp8 opponent configurations: (tokens on the MMA's M side, num_warps, num_stages)
FP8_CONFIGS = [(True, 4, 2), (False, 4, 2), (True, 8, 3)]


def _load_baseline(path: str):
    spec = importlib.util.spec_from_file_location("kvarn_ops.triton_decode_baseline", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _runner(mod, case: bd.KVarNCase, cfg, warps: int | None, splits: int | None = None):
    return case.runner(cfg, mod, num_warps=warps, num_splits=splits)


def _free() -> None:
    if bd.DEV != "cpu":
        torch.cuda.empty_cache()


def fp8_check(d: int, hq: int, hkv: int) -> dict:
    """The fp8 kernel against SDPA on its dequantized cache: 2 requests, a partial last block."""
    case = fp8_decode.FP8Case(2, 4133, d, hq, hkv, bd.DEV)
    ref = case.reference()
    res = {}
    for trans, w, st in FP8_CONFIGS:
        for splits in (1, 5):
            out = case.runner(splits, w, st, trans)()
            res[f"trans{int(trans)}_w{w}_s{st}_splits{splits}"] = bd._cos(out, ref)
    return res


def fp8_time(b: int, ctx: int, d: int, hq: int, hkv: int, split_counts: tuple[int, ...]):
    """The fastest fp8 launch of the row: each configuration at each split count."""
    case = fp8_decode.FP8Case(b, ctx, d, hq, hkv, bd.DEV)
    best = None
    for splits in sorted(set(split_counts)):
        for trans, w, st in FP8_CONFIGS:
            t = bd.bench(case.runner(splits, w, st, trans))
            if best is None or t < best[0]:
                best = (t, f"{'T' if trans else 'N'}/w{w}/s{st}/{splits}sp")
    del case
    _free()
    assert best is not None
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--contexts", default="8192,32768,131072")
    ap.add_argument("--no-sdpa", action="store_true")
    ap.add_argument("--no-fp8", action="store_true")
    ap.add_argument("--baseline", help="a past triton_decode.py (from git history) to compare with")
    ap.add_argument(
        "--variants",
        default="",
        help="new-kernel variants to time after the table, D:warps:maxnreg:splitx[:maxsplits],..."
        " (maxnreg 0 = uncapped; splitx multiplies the automatic split count; maxsplits replaces"
        " KVARN_MAX_SPLITS)",
    )
    ap.add_argument("--variant-batches", default="1,8,32,128")
    ap.add_argument("--variant-contexts", default="32768,131072")
    ap.add_argument("--smoke", action="store_true", help="tiny run on the CPU (interpreter)")
    args = ap.parse_args()
    if args.smoke:
        bd.DEV = "cpu"
    from kvarn_ops import triton_decode as new

    r7 = _load_baseline(args.baseline) if args.baseline else new
    cfg = config.KVarNConfig.from_env(os.environ)
    # run 7 ran with at most 64 splits (the default then): its column stays comparable
    cfg7 = dataclasses.replace(cfg, max_splits=64)
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
        "new_warps": dict(new.WARPS),
        "new_maxnreg": dict(new.MAXNREG),
        "fp8_configs": [list(c) for c in FP8_CONFIGS],
    }
    if not args.no_fp8 and bd.DEV != "cpu":
        meta["fp8_check_cos"] = {d: fp8_check(d, hq, hkv) for d, hq, hkv in bd.SHAPES}
    print(json.dumps(meta), flush=True)
    rows = []
    for d, hq, hkv in bd.SHAPES:
        for b in map(int, args.batches.split(",")):
            for ctx in map(int, args.contexts.split(",")):
                t0 = time.time()
                case = bd.KVarNCase(b, ctx, d, hq, hkv)
                f_r7 = _runner(r7, case, cfg7, 4)
                f_new = _runner(new, case, cfg, None)
                cos = bd._cos(f_new(), f_r7())
                t_r7 = bd.bench(f_r7)
                t_new = bd.bench(f_new)
                # run 7's split count (4-warp programs; the fp8 kernel tries it and the new one's)
                splits = r7.choose_splits(b, hkv, case.nb, sms, cfg7)
                warps_new = new.choose_warps(b, hkv, case.nb, sms, cfg, d)
                if bd.DEV == "cpu":
                    warps_new = 4
                splits_new = new.choose_splits(b, hkv, case.nb, sms, cfg, warps_new)
                nbytes = case.nbytes
                del case, f_r7, f_new
                _free()
                t8 = c8 = None
                if not args.no_fp8:
                    t8, c8 = fp8_time(b, ctx, d, hq, hkv, (splits, splits_new))
                ts = None if args.no_sdpa else bd.sdpa_time(b, ctx, d, hq, hkv)
                _free()
                fp8_bytes = 2 * b * hkv * ctx * d
                row = {
                    "D": d,
                    "Hq": hq,
                    "Hkv": hkv,
                    "batch": b,
                    "ctx": ctx,
                    "splits": splits,
                    "splits_new": splits_new,
                    "warps_new": warps_new,
                    "baseline": args.baseline,
                    "run7_us": t_r7 * 1e6,
                    "new_us": t_new * 1e6,
                    "new_vs_run7": t_r7 / t_new,
                    "fp8_us": None if t8 is None else t8 * 1e6,
                    "fp8_config": c8,
                    "new_vs_fp8": None if t8 is None else t8 / t_new,
                    "floor_fp8_us": fp8_bytes / bw * 1e6,
                    "new_vs_fp8_floor": fp8_bytes / bw / t_new,
                    "fp8_frac_copy_bw": None if t8 is None else fp8_bytes / t8 / bw,
                    "sdpa_fp16_us": None if ts is None else ts * 1e6,
                    "new_vs_fp16": None if ts is None else ts / t_new,
                    "kvarn_MB": nbytes / 1e6,
                    "new_TBps": nbytes / t_new / 1e12,
                    "new_frac_copy_bw": nbytes / t_new / bw,
                    "run7_frac_copy_bw": nbytes / t_r7 / bw,
                    "floor_kvarn_us": nbytes / bw * 1e6,
                    "cos_new_run7": cos,
                    "wall_s": round(time.time() - t0, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    variants = []
    for spec in filter(None, args.variants.split(",")):
        d_s, w_s, cap_s, sx_s, *ms = spec.split(":")
        d, warps, cap, sx = int(d_s), int(w_s), int(cap_s), int(sx_s)
        vcfg = dataclasses.replace(cfg, max_splits=int(ms[0])) if ms else cfg
        hq, hkv = next((h, k) for dd, h, k in bd.SHAPES if dd == d)
        saved = new.MAXNREG.get(d)
        new.MAXNREG[d] = cap or None
        for b in map(int, args.variant_batches.split(",")):
            for ctx in map(int, args.variant_contexts.split(",")):
                case = bd.KVarNCase(b, ctx, d, hq, hkv)
                splits = min(vcfg.max_splits, case.splits(vcfg, warps) * sx)
                f_ref = _runner(r7, case, cfg, 4)
                f_var = _runner(new, case, vcfg, warps, splits)
                cos = bd._cos(f_var(), f_ref())
                t = bd.bench(f_var)
                row = {
                    "D": d,
                    "batch": b,
                    "ctx": ctx,
                    "warps": warps,
                    "maxnreg": cap,
                    "splits": splits,
                    "us": t * 1e6,
                    "frac_copy_bw": case.nbytes / t / bw,
                    "cos_vs_run7": cos,
                }
                del case, f_ref, f_var
                _free()
                variants.append(row)
                print(json.dumps(row), flush=True)
        new.MAXNREG[d] = saved
    with open(os.path.join(args.out, "speedpath.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "variants": variants}, f, indent=1)
    write_md(os.path.join(args.out, "speedpath.md"), meta, rows, variants)


def _f(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def write_md(path: str, meta: dict, rows: list[dict], variants: list[dict]) -> None:
    lines = [
        f"{meta['device']}, {meta['sms']} SMs, torch {meta['torch']}, Triton {meta['triton']}; "
        f"measured copy bandwidth {meta['copy_bw_TBps']} TB/s (read + write); preset "
        f"{meta['preset']}; new kernel warps {meta['new_warps']}, maxnreg {meta['new_maxnreg']}",
        "",
        "| D | Hq/Hkv | batch | ctx | warps, splits new (baseline) | baseline µs | new µs | new / baseline | fp8 µs (cfg) | "
        "new vs fp8 | fp8 floor µs | new vs fp8 floor | SDPA fp16 µs | new vs fp16 | new TB/s | "
        "of copy BW: new (baseline) | KVarN floor µs | cos(new, baseline) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['D']} | {r['Hq']}/{r['Hkv']} | {r['batch']} | {r['ctx'] // 1024}K | "
            f"{r['warps_new']}w {r['splits_new']} ({r['splits']}) | {r['run7_us']:.1f} | {r['new_us']:.1f} | {r['new_vs_run7']:.2f}× | "
            f"{_f(r['fp8_us'], '.1f')} ({r['fp8_config'] or '-'}) | {_f(r['new_vs_fp8'], '.2f')}× | "
            f"{r['floor_fp8_us']:.1f} | {r['new_vs_fp8_floor']:.2f}× | "
            f"{_f(r['sdpa_fp16_us'], '.1f')} | {_f(r['new_vs_fp16'], '.2f')}× | "
            f"{r['new_TBps']:.2f} | {r['new_frac_copy_bw']:.0%} ({r['run7_frac_copy_bw']:.0%}) | "
            f"{r['floor_kvarn_us']:.1f} | {r['cos_new_run7']:.6f} |"
        )
    if variants:
        lines += [
            "",
            "| D | batch | ctx | warps | maxnreg | splits | µs | of copy BW | cos(variant, baseline) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for v in variants:
            lines.append(
                f"| {v['D']} | {v['batch']} | {v['ctx'] // 1024}K | {v['warps']} | "
                f"{v['maxnreg'] or '-'} | {v['splits']} | {v['us']:.1f} | "
                f"{v['frac_copy_bw']:.0%} | {v['cos_vs_run7']:.6f} |"
            )
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
