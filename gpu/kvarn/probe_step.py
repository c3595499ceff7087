"""Where a layer's decode step spends its GPU time: torch.profiler's kernel table for
``bench_serving.kvarn_step`` against the attention call alone (``KVarNCase.runner``), per shape.

    python3 gpu/kvarn/probe_step.py [--shapes 1x8192,8x8192] [--d 128]
"""

from __future__ import annotations

import argparse

import bench_decode as bd
import bench_serving as bs
import torch
from kvarn_ops import config
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x8192,8x8192")
    ap.add_argument("--d", type=int, default=128)
    args = ap.parse_args()
    cfg = config.KVarNConfig()
    d, hq, hkv = next(s for s in bd.SHAPES if s[0] == args.d)
    for shape in args.shapes.split(","):
        b, ctx = map(int, shape.split("x"))
        case = bd.KVarNCase(b, ctx, d, hq, hkv)
        for name, fn in (("step", bs.kvarn_step(case, cfg)), ("decode", case.runner(cfg))):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
            print(f"== {name} b={b} ctx={ctx} D={d} (20 calls)")
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))


if __name__ == "__main__":
    main()
