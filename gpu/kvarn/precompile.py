"""Fill Triton's cache with the decode variants of several kernel options at once, one process per
(head size, option), so a benchmark run after it does not wait on compiles one at a time. Both
must see the same cache: Triton's default (~/.triton/cache) or one TRITON_CACHE_DIR.

    TRITON_CACHE_DIR=DIR python3 gpu/kvarn/precompile.py [--l2pf 0 --l2pf 1] [--d 128 --d 256]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import bench_decode as bd  # also loads kvarn_ops (through _load)
from kvarn_ops import config


def one(d: int, l2pf: int) -> None:
    hq, hkv = next((q, k) for dd, q, k in bd.SHAPES if dd == d)
    case = bd.KVarNCase(1, 1024, d, hq, hkv)
    case.runner(config.KVarNConfig(), l2_prefetch=l2pf)()  # compiles every variant the policy has


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, action="append")
    ap.add_argument("--l2pf", type=int, action="append")
    ap.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        one(*a.one)
        return
    t0 = time.time()
    jobs = [(d, p) for d in a.d or (128, 256) for p in (a.l2pf or (1,))]
    procs = [
        subprocess.Popen([sys.executable, __file__, "--one", str(d), str(p)], env=os.environ)
        for d, p in jobs
    ]
    bad = [j for j, p in zip(jobs, procs, strict=True) if p.wait() != 0]
    print(f"precompiled {len(jobs) - len(bad)} of {len(jobs)} in {time.time() - t0:.0f} s")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
