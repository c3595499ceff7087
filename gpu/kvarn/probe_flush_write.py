"""What a step's flush and pool write cost on the GPU when nothing is flushed (127 of 128 steps),
by the length of the flush list (one entry per pool slot: an engine of N sequences keeps about
3N + 8192/G slots, kvarn_pool.py), each part captured in a CUDA graph:

- ``fused``: ``LayerStore.flush_write`` (one launch: a program per slot and KV head, then the write);
- ``store+write``: the store kernel over the list, then ``rotate_write`` (two launches);
- ``store``: the store kernel over the list alone; ``write``: ``rotate_write`` alone.

    python3 gpu/kvarn/probe_flush_write.py [--out DIR] [--batches 1,8] [--slots 67,835]

Prints a JSON line per row (and writes DIR/flush-write.json with --out).
"""

from __future__ import annotations

import argparse
import json
import os

import bench_decode as bd
import torch
from kvarn_ops import step, triton_store


def _parts(store, case, by_slot, h16, key, value, w_slots, w_rows) -> dict:
    ids = step.slot_ids(by_slot.shape[0], by_slot.device)

    def fused():
        store.flush_write(by_slot, 1, h16, key, value, w_slots, w_rows)

    def store_only():
        store.store(ids, by_slot, 1)

    def write_only():
        triton_store.rotate_write(case.pool_k, case.pool_v, h16, key, value, w_slots, w_rows)

    def both():
        store_only()
        write_only()

    return {"fused": fused, "store+write": both, "store": store_only, "write": write_only}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--slots", default="67,835")
    args = ap.parse_args()
    rows = []
    for d, hq, hkv in bd.SHAPES:
        for b in map(int, args.batches.split(",")):
            case = bd.KVarNCase(b, 1024, d, hq, hkv)
            lay = case.lay
            store = triton_store.LayerStore(case.cache, case.pool_k, case.pool_v, lay)
            key = torch.randn(b, hkv, d, device="cuda").half()
            value = torch.randn_like(key)
            w_slots = torch.arange(b, 2 * b, dtype=torch.int64, device="cuda")
            w_rows = torch.full((b,), 5, dtype=torch.int64, device="cuda")
            h16 = case.h16.contiguous()
            for n in map(int, args.slots.split(",")):
                by_slot = torch.full((n,), -1, dtype=torch.int32, device="cuda")
                parts = _parts(store, case, by_slot, h16, key, value, w_slots, w_rows)
                row = {"D": d, "Hkv": hkv, "batch": b, "slots": n}
                for name, fn in parts.items():
                    row[f"{name}_us"] = bd.bench(fn) * 1e6
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        with open(os.path.join(args.out, "flush-write.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
