"""KVarN's decode step, past copies of the package against the tree's, side by side in one process
(issue #40: the rows that trail FlashInfer, and the rows a change there could cost). Per row the
steps are built over the same synthetic cache (the same token each) and timed in turn, ``--rounds``
times each (CUDA graph, L2 flushed, median of 50: bench_baselines.Timer), then taken apart with
torch.profiler; each output is compared with the first package's (cosine). ``--warps`` adds the
tree's step at other warp counts.

    git archive HEAD kvarn/files/vllm/v1/attention/ops/kvarn | tar -x -C build/past
    python3 gpu/kvarn/probe_ab.py --pkg past=build/past/kvarn/files/vllm/v1/attention/ops/kvarn \\
        --out DIR [--pkg NAME=DIR ...] [--rows 1x8192x256,...] [--rounds 3] [--warps 4]

``--warm NAME`` only compiles that package's kernels over the rows (run one per package in
parallel first: Triton's disk cache then serves the timed run). Writes DIR/ab.json: per row, each
side's graph µs per round, their medians, each median over the first package's and each side's
kernel µs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_baselines as bb
import bench_decode as bd
import bench_serving as bs
from conftest import load_package
from kvarn_ops import config, step
from probe_split_sweep import kernel_us

ROWS = (
    "1x8192x256,1x32768x256,8x8192x256,1x131072x256,8x131072x256,1x8192x128,8x8192x128,32x32768x256"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pkg", action="append", default=[], help="NAME=DIR: a copy of the package")
    ap.add_argument("--warm", default="", help="only compile this package's kernels (or 'tree')")
    ap.add_argument("--out", default=".")
    ap.add_argument("--rows", default=ROWS, help="batch x ctx x D, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warps", default="", help="the tree's step at these warp counts too")
    ap.add_argument("--deadline", type=float, default=300)
    a = ap.parse_args()
    t0 = time.time()
    pkgs: dict = {}
    for spec in a.pkg:
        name, where = spec.split("=", 1)
        # a module name of word characters only (an experiment's NAME may be "early+min1_pool2")
        pkgs[name] = load_package("kvarn_ops_" + re.sub(r"\W", "_", name), Path(where).resolve())
    pkgs["tree"] = None
    if a.warm:
        pkgs = {a.warm: pkgs[a.warm]}
    cfg = config.KVarNConfig()
    timer = bb.Timer()
    res: dict = {}
    for spec in a.rows.split(","):
        if time.time() - t0 > a.deadline:
            res[spec] = {"skipped": "deadline"}
            continue
        b, ctx, d = map(int, spec.split("x"))
        hq, hkv = next((q, k) for dd, q, k in bd.SHAPES if dd == d)
        torch.manual_seed(bb.SEED)
        case = bd.KVarNCase(b, ctx, d, hq, hkv)
        sides = {}
        for name, pkg in pkgs.items():
            torch.manual_seed(bb.SEED + 1)  # the same token written by every side
            own = cfg if pkg is None else importlib.import_module(f"{pkg.__name__}.config")
            sides[name] = bs.kvarn_step(case, own if pkg is None else own.KVarNConfig(), ops=pkg)
        if a.warm:
            for fn in sides.values():
                fn()
            torch.cuda.synchronize()
            print("warm", a.warm, spec, flush=True)
            continue
        policy = step.fixed_launch
        chosen = policy(b, hkv, d, 131072, case.lay.group, cfg, torch.device("cuda"))
        for w in filter(None, a.warps.split(",")):
            launch = (chosen[0], int(w))
            step.fixed_launch = lambda *args, _l=launch: _l
            try:
                torch.manual_seed(bb.SEED + 1)
                sides[f"tree w{w}"] = bs.kvarn_step(case, cfg)
            finally:
                step.fixed_launch = policy
        outs = {k: fn().float().clone() for k, fn in sides.items()}
        row: dict = {"launch": chosen, "graph_us": {k: [] for k in sides}}
        for _ in range(a.rounds):
            for k, fn in sides.items():
                row["graph_us"][k].append(round(timer.graph_us(fn), 2))
        row["median_us"] = {k: statistics.median(v) for k, v in row["graph_us"].items()}
        first = row["median_us"][next(iter(sides))]
        row["over_first"] = {k: round(v / first, 3) for k, v in row["median_us"].items()}
        row["kernels_us"] = {k: kernel_us(fn) for k, fn in sides.items()}
        ref = outs[next(iter(sides))].flatten()
        row["cos_to_first"] = {
            k: round(torch.nn.functional.cosine_similarity(v.flatten(), ref, dim=0).item(), 6)
            for k, v in outs.items()
        }
        res[spec] = row
        print(spec, json.dumps({k: row[k] for k in ("median_us", "over_first")}), flush=True)
        del case, sides, outs
        torch.cuda.empty_cache()
    if a.warm:
        return
    res["seconds"] = round(time.time() - t0, 1)
    (Path(a.out) / "ab.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
