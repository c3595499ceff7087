"""Decode attention alone on the device: KVarN fused decode against torch SDPA on an fp16 cache of
the same shape, with the floors set by the bytes each reads at the card's measured copy bandwidth.

    python3 gpu/kvarn/bench_decode.py --out DIR [--batches 1,8,32,128] [--contexts 8192,32768,131072]

Writes DIR/bench.json and DIR/bench.md. Times are medians of triton.testing.do_bench (which clears
the L2 between runs). The KVarN time includes the q rotation, the split-K combine and the output
un-rotation, i.e. the whole kvarn_decode call.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import _load  # noqa: F401
import torch
import torch.nn.functional as F
import triton
from kvarn_ops import config, hadamard, layout, triton_decode

SHAPES = [(128, 32, 8), (256, 24, 4)]  # (D, query heads, KV heads)
PRESET = "kvarn_k4v2_g128"
DEV = "cuda"  # --smoke: "cpu" with the Triton interpreter, to check this script without a GPU


def bench(fn, rep: int = 100) -> float:
    if DEV == "cpu":
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    return triton.testing.do_bench(fn, warmup=10, rep=rep, return_mode="median") * 1e-3


def copy_bandwidth() -> float:
    n = 4 << 30
    x = torch.empty(n, dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    t = bench(lambda: y.copy_(x), rep=200)
    return 2 * n / t  # bytes read + written per second


def kvarn_case(b: int, ctx: int, d: int, hq: int, hkv: int, cfg: config.KVarNConfig):
    lay = layout.record_layout(PRESET, d)
    g = lay.group
    nb = -(-ctx // g)
    num_blocks = b * nb
    cache = torch.randint(0, 256, (num_blocks, hkv, lay.size), dtype=torch.uint8, device=DEV)
    f16 = cache.view(torch.float16)
    for off, count, value in (
        (lay.k_scol, d, 0.05),
        (lay.k_zp, d, -0.4),
        (lay.k_srow, g, 1.0),
        (lay.v_scol, d, 1.0),
        (lay.v_srow, g, 0.3),
        (lay.v_zp, g, -0.45),
    ):
        f16[..., off // 2 : off // 2 + count] = value
    # The sink block and the unflushed tail block of each request live in the fp16 pool.
    pool_k = torch.randn(2 * b, g, hkv, d, device=DEV).half()
    pool_v = torch.randn_like(pool_k)
    table = torch.randperm(num_blocks, device=DEV).to(torch.int32).view(b, nb)
    block_slot = torch.full((num_blocks,), -1, dtype=torch.int32, device=DEV)
    block_slot[table[:, 0].long()] = torch.arange(b, dtype=torch.int32, device=DEV)
    if nb > 1:
        block_slot[table[:, -1].long()] = torch.arange(b, 2 * b, dtype=torch.int32, device=DEV)
    seq_lens = torch.full((b,), ctx, dtype=torch.int32, device=DEV)
    q = torch.randn(b, hq, d, device=DEV).half()
    h16 = hadamard.hadamard(d, torch.float16, DEV)
    ws = triton_decode.DecodeWorkspace()
    splits = triton_decode.choose_splits(b, hkv, nb, triton_decode._num_sms(q.device), cfg)

    def run():
        return triton_decode.kvarn_decode(
            q,
            cache,
            pool_k,
            pool_v,
            block_slot,
            table,
            seq_lens,
            lay,
            h16,
            d**-0.5,
            cfg,
            max_seq_len=ctx,
            workspace=ws,
        )

    out = run()
    if DEV != "cpu":
        torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    t = bench(run)
    n_pool = 2 if nb > 1 else 1
    nbytes = b * hkv * ((nb - n_pool) * lay.size + n_pool * 2 * g * d * 2)
    return t, nbytes, splits


def sdpa_case(b: int, ctx: int, d: int, hq: int, hkv: int) -> float:
    # Decode with grouped heads is exactly attention of the qpk queries of each KV head over its
    # whole context, so fold them into the query length: no GQA expansion, flash backend eligible.
    k = torch.empty(b, hkv, ctx, d, dtype=torch.float16, device=DEV).normal_()
    v = torch.empty_like(k).normal_()
    q = torch.randn(b, hkv, hq // hkv, d, dtype=torch.float16, device=DEV)
    t = bench(lambda: F.scaled_dot_product_attention(q, k, v))
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--contexts", default="8192,32768,131072")
    ap.add_argument("--no-sdpa", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny run on the CPU (interpreter)")
    args = ap.parse_args()
    if args.smoke:
        global DEV
        DEV = "cpu"
    cfg = config.KVarNConfig.from_env()
    if DEV == "cpu":
        name, sms, mem, bw = "cpu (interpreter smoke run)", 4, 0.0, 1e10
    else:
        props = torch.cuda.get_device_properties(0)
        name, sms, mem = props.name, props.multi_processor_count, props.total_memory / 2**30
        bw = copy_bandwidth()
    meta = {
        "device": name,
        "sms": sms,
        "memory_gib": round(mem, 1),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_bw_TBps": round(bw / 1e12, 3),
        "config": cfg.__dict__,
        "preset": PRESET,
    }
    print(json.dumps(meta), flush=True)
    rows = []
    for d, hq, hkv in SHAPES:
        for b in map(int, args.batches.split(",")):
            for ctx in map(int, args.contexts.split(",")):
                t0 = time.time()
                tk, nbytes, splits = kvarn_case(b, ctx, d, hq, hkv, cfg)
                if DEV != "cpu":
                    torch.cuda.empty_cache()
                ts = None if args.no_sdpa else sdpa_case(b, ctx, d, hq, hkv)
                if DEV != "cpu":
                    torch.cuda.empty_cache()
                fp16_bytes = 2 * b * hkv * ctx * d * 2
                row = {
                    "D": d,
                    "Hq": hq,
                    "Hkv": hkv,
                    "batch": b,
                    "ctx": ctx,
                    "splits": splits,
                    "kvarn_us": tk * 1e6,
                    "sdpa_fp16_us": None if ts is None else ts * 1e6,
                    "speedup_vs_fp16": None if ts is None else ts / tk,
                    "kvarn_MB": nbytes / 1e6,
                    "kvarn_TBps": nbytes / tk / 1e12,
                    "frac_copy_bw": nbytes / tk / bw,
                    "floor_kvarn_us": nbytes / bw * 1e6,
                    "floor_fp8_us": fp16_bytes / 2 / bw * 1e6,
                    "floor_fp16_us": fp16_bytes / bw * 1e6,
                    "wall_s": round(time.time() - t0, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = [
        f"{meta['device']}, {meta['sms']} SMs, torch {meta['torch']}, Triton {meta['triton']}; "
        f"measured copy bandwidth {meta['copy_bw_TBps']} TB/s (read + write); preset {PRESET}",
        "",
        "| D | Hq/Hkv | batch | ctx | splits | KVarN µs | SDPA fp16 µs | speed-up | KVarN TB/s | of copy BW | floor KVarN µs | floor fp8 µs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sd = "-" if r["sdpa_fp16_us"] is None else f"{r['sdpa_fp16_us']:.1f}"
        sp = "-" if r["speedup_vs_fp16"] is None else f"{r['speedup_vs_fp16']:.2f}×"
        lines.append(
            f"| {r['D']} | {r['Hq']}/{r['Hkv']} | {r['batch']} | {r['ctx'] // 1024}K | {r['splits']} | "
            f"{r['kvarn_us']:.1f} | {sd} | {sp} | {r['kvarn_TBps']:.2f} | {r['frac_copy_bw']:.0%} | "
            f"{r['floor_kvarn_us']:.1f} | {r['floor_fp8_us']:.1f} |"
        )
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
