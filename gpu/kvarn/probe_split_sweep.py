"""KVarN's step at the rows where it trails FlashInfer (issue #40: D256 batch 1 at 8K and 32K,
batch 8 at 8K; D128 batch 1 8K beside them), with the launch's (splits, warps) forced over a grid
instead of the policy's ``step.fixed_launch`` choice, which is taken for the longest context
(max_model_len 131072) so a captured step stays right as sequences grow. CUDA graph, L2 flushed,
median of 50 (bench_baselines.Timer); each point's kernels taken apart with torch.profiler.

    python3 gpu/kvarn/probe_split_sweep.py --out DIR [--rows 1x8192x256,...] [--splits 0,8,...]

Writes DIR/split_sweep.json: per row, the policy's launch and every point's graph µs and kernel
µs (split 0 = the policy's own choice).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_baselines as bb
import bench_decode as bd
import bench_serving as bs
from kvarn_ops import config, step


def kernel_us(fn) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    return {
        e.key[:60]: round(e.device_time_total / 20, 2)
        for e in prof.key_averages()
        if e.device_time_total > 0
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rows", default="1x8192x256,1x32768x256,8x8192x256,1x8192x128")
    ap.add_argument("--splits", default="0,4,8,16,32,64")
    ap.add_argument("--warps", default="0,2,4")
    ap.add_argument("--deadline", type=float, default=240)
    a = ap.parse_args()
    t0 = time.time()
    cfg = config.KVarNConfig.from_env(os.environ)
    timer = bb.Timer()
    policy = step.fixed_launch
    res: dict = {}
    for spec in a.rows.split(","):
        b, ctx, d = map(int, spec.split("x"))
        hq, hkv = next((q, k) for dd, q, k in bd.SHAPES if dd == d)
        key = f"D{d} b{b} {ctx // 1024}K"
        chosen = policy(b, hkv, d, 131072, 128, cfg, torch.device("cuda"))
        row: dict = {"policy": {"splits": chosen[0], "warps": chosen[1]}, "points": []}
        torch.manual_seed(bb.SEED)
        case = bd.KVarNCase(b, ctx, d, hq, hkv)
        for s in map(int, a.splits.split(",")):
            for w in map(int, a.warps.split(",")):
                if time.time() - t0 > a.deadline:
                    row["points"].append({"splits": s, "warps": w, "skipped": "deadline"})
                    continue
                launch = (s or chosen[0], w or chosen[1])
                step.fixed_launch = lambda *args, _l=launch: _l
                try:
                    fn = bs.kvarn_step(case, cfg)
                    pt = {"splits": launch[0], "warps": launch[1], "graph_us": timer.graph_us(fn)}
                    pt["kernels_us"] = kernel_us(fn)
                except Exception as e:  # a variant that cannot compile or launch is kept
                    pt = {"splits": launch[0], "warps": launch[1], "error": bb._err(e)}
                finally:
                    step.fixed_launch = policy
                row["points"].append(pt)
                print(key, json.dumps(pt), flush=True)
        ok = [p for p in row["points"] if "graph_us" in p]
        if ok:
            row["best"] = min(ok, key=lambda p: p["graph_us"])
        res[key] = row
        case = None
        torch.cuda.empty_cache()
    res["seconds"] = round(time.time() - t0, 1)
    (Path(a.out) / "split_sweep.json").write_text(json.dumps(res, indent=1))
    for k, r in res.items():
        if isinstance(r, dict) and "best" in r:
            print(k, "policy", r["policy"], "best", r["best"]["splits"], r["best"]["warps"],
                  round(r["best"]["graph_us"], 1))  # fmt: skip


if __name__ == "__main__":
    main()
