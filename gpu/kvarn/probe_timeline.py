"""Where a decode program's time goes, per program (issue #40): a copy of the package whose decode
kernel stamps each program's clock (``gpu/kvarn/experiments/timeline.diff``: %globaltimer at entry
and exit, %clock64 after the prologue, the sink-and-tail loop, the compressed loop and the stores,
and the SM it ran on) into a buffer named by ``KVARN_TS``; this script allocates the buffer, runs
the step eagerly after an L2 flush and writes every program's stamps and a summary.

    bash gpu/kvarn/experiments/build.sh timeline    # build/v/timeline; carry it to the GPU machine
    python3 gpu/kvarn/probe_timeline.py --pkg build/v/timeline --out DIR [--rows 1x8192x256,...]

Writes DIR/timeline.json: per row, the launch, the kernel's span (first entry to last exit, ns),
the program that exits last and, per split, the median over its programs (batches x KV heads) of
the entry and exit offsets from the first program's entry, and the prologue / sink-and-tail /
compressed / epilogue times (clock cycles turned into ns by each program's own globaltimer span),
each program's figures the median over ``--reps`` runs; DIR/timeline-programs.json has every
program's (with its SM). ``summarise`` makes the first from the second.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

SLOTS = 8  # int64 a program: gt entry, clk entry, clk prologue, clk sink-tail, clk comp, clk end, gt exit, sm
PHASES = ("entry_ns", "exit_ns", "prologue_ns", "sink_tail_ns", "compressed_ns", "epilogue_ns")


def summarise(row: dict) -> dict:
    """A row of timeline-programs.json in brief: the live programs (those past the live-split
    check), the last to exit, and per split the median of each phase over its programs."""
    progs = row["programs"]
    splits: dict[int, list[dict]] = {}
    for p in progs:
        splits.setdefault(p["split"], []).append(p)
    return {
        "launch": row["launch"],
        "span_ns": row["span_ns"],
        "programs_live": len(progs),
        "last_to_exit": max(progs, key=lambda p: p["exit_ns"]),
        "by_split": {
            str(k): {f: statistics.median(p[f] for p in v) for f in PHASES}
            for k, v in sorted(splits.items())
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pkg", required=True, help="the instrumented copy of the package")
    ap.add_argument("--out", default=".")
    ap.add_argument("--rows", default="1x8192x256,1x32768x256,1x8192x128,8x8192x256")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    buf = torch.zeros(1 << 20, dtype=torch.int64, device="cuda")
    os.environ["KVARN_TS"] = str(buf.data_ptr())  # read when the copy's kernels module loads

    import bench_baselines as bb
    import bench_decode as bd
    import bench_serving as bs
    from conftest import load_package

    pkg = load_package("kvarn_ops_tl", Path(a.pkg).resolve())
    cfg = importlib.import_module(f"{pkg.__name__}.config").KVarNConfig()
    step = importlib.import_module(f"{pkg.__name__}.step")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    res: dict = {}
    for spec in a.rows.split(","):
        b, ctx, d = map(int, spec.split("x"))
        hq, hkv = next((q, k) for dd, q, k in bd.SHAPES if dd == d)
        torch.manual_seed(bb.SEED)
        case = bd.KVarNCase(b, ctx, d, hq, hkv)
        torch.manual_seed(bb.SEED + 1)
        fn = bs.kvarn_step(case, cfg, ops=pkg)
        launch = step.fixed_launch(b, hkv, d, 131072, case.lay.group, cfg, torch.device("cuda"))
        splits = launch[0]
        n = b * hkv * splits
        fn()
        fn()
        torch.cuda.synchronize()
        reps = []
        for _ in range(a.reps):
            flush.fill_(1)
            buf.zero_()
            torch.cuda.synchronize()
            fn()
            torch.cuda.synchronize()
            reps.append(buf[: n * SLOTS].view(n, SLOTS).cpu())
        progs = []
        spans = []
        for t in reps:
            live = t[:, 0] > 0
            spans.append(int(t[live, 6].max() - t[live, 0].min()))
        for i in range(n):
            # a split past the live ones stamps its entry only: no exit, no phases
            rows = [t[i] for t in reps if t[i, 6] > 0]
            if not rows:
                continue
            t0s = [int(t[:, 0][t[:, 0] > 0].min()) for t in reps if t[i, 6] > 0]

            def med(f, rows=rows):
                return statistics.median(f(r) for r in rows)

            ns_per_clk = med(lambda r: float(r[6] - r[0]) / max(1, int(r[5] - r[1])))
            progs.append(
                {
                    "b": i // (hkv * splits),
                    "kvh": (i // splits) % hkv,
                    "split": i % splits,
                    "sm": int(rows[0][7]),
                    "entry_ns": statistics.median(
                        int(r[0]) - z for r, z in zip(rows, t0s, strict=True)
                    ),
                    "exit_ns": statistics.median(
                        int(r[6]) - z for r, z in zip(rows, t0s, strict=True)
                    ),
                    "prologue_ns": round(med(lambda r: int(r[2] - r[1])) * ns_per_clk),
                    "sink_tail_ns": round(med(lambda r: int(r[3] - r[2])) * ns_per_clk),
                    "compressed_ns": round(med(lambda r: int(r[4] - r[3])) * ns_per_clk),
                    "epilogue_ns": round(med(lambda r: int(r[5] - r[4])) * ns_per_clk),
                }
            )
        res[spec] = {"launch": list(launch), "span_ns": statistics.median(spans), "programs": progs}
        brief = summarise(res[spec])
        print(spec, json.dumps({k: v for k, v in brief.items() if k != "by_split"}), flush=True)
        del case, fn
        torch.cuda.empty_cache()
    out = Path(a.out)
    (out / "timeline-programs.json").write_text(json.dumps(res))
    (out / "timeline.json").write_text(
        json.dumps({k: summarise(v) for k, v in res.items()}, indent=1)
    )


if __name__ == "__main__":
    main()
