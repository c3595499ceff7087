"""KVarN decode against the best fp16 SDPA call, in a CUDA graph and eager, with the host time of a
call: the baselines of issue #24, in one process on the same shapes.

For each (D, batch, context):

- KVarN: the whole ``kvarn_decode`` (bench_decode.KVarNCase: random codes, sink and last block in the
  fp16 pool);
- SDPA on an fp16 cache two ways: the query heads of a KV head folded into the query length
  (``q [B, Hkv, Hq/Hkv, D]``: what the README timed before) and SDPA's own grouped-query path
  (``q [B, Hq, 1, D]``, ``enable_gqa=True``); "best SDPA" is the faster of the two;
- each timed four ways: **graph** (captured in a CUDA graph, replayed under do_bench, L2 cleared
  before each run: the GPU time as a graph-captured serving loop sees it); **eager** (the same call
  launched from Python under do_bench); **back to back** (100 eager calls, one synchronize, per call:
  what an eager decode loop gets when the host is the bottleneck); **host** (the CPU time of one call
  returning, 50 calls without a synchronize, per call: launch cost, Python and small torch ops).

With ``--step`` each side is one layer's whole decode step instead of the attention call alone: KVarN
runs ``ops/kvarn/step.decode_step`` (the flush list of an engine's pool, empty as in 127 of 128
steps, the write of each request's token into the pool, the decode with the launch fixed from a
128K max_model_len: the path the backend takes for a step of single-token decodes, with no host
read), fp16 writes each request's token into its cache then calls SDPA.

    python3 gpu/kvarn/bench_serving.py --out DIR [--batches 1,8,32,128] [--contexts 8192,32768,131072] [--step]

Writes DIR/serving.json and DIR/serving.md (DIR/serving-step.* with ``--step``).
``--eager-ab ROUNDS``: only the two steps back to back, alternating, with the ratio per round
(DIR/serving-eager-ab.json): the eager comparison on a host whose speed drifts.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import bench_decode as bd  # also loads kvarn_ops (through _load)
import torch
import torch.nn.functional as F
import triton
from kvarn_ops import config


def eager(fn) -> float:
    """Seconds per call launched from Python, under do_bench (its events around each call)."""
    return triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median") * 1e-3


def back_to_back(fn, n: int = 100) -> tuple[float, float]:
    """(seconds per call for n eager calls and one synchronize, host seconds per call returning)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    per_call = (time.perf_counter() - start) / n
    # Host time: few enough calls that the launch queue never fills (it would block the host).
    host = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(50):
            fn()
        host.append((time.perf_counter() - start) / 50)
        torch.cuda.synchronize()
    return per_call, sorted(host)[len(host) // 2]


def sdpa_calls(b: int, ctx: int, d: int, hq: int, hkv: int):
    k = torch.empty(b, hkv, ctx, d, dtype=torch.float16, device="cuda").normal_()
    v = torch.empty_like(k).normal_()
    q_fold = torch.randn(b, hkv, hq // hkv, d, dtype=torch.float16, device="cuda")
    q_gqa = q_fold.reshape(b, hq, 1, d)  # query head h reads KV head h // (hq // hkv)
    fold = lambda: F.scaled_dot_product_attention(q_fold, k, v)  # noqa: E731
    gqa = lambda: F.scaled_dot_product_attention(q_gqa, k, v, enable_gqa=True)  # noqa: E731
    # Same numbers both ways (the fold is exact for decode): a wrong baseline would show here.
    a, g = fold().reshape(b, hq, d).float(), gqa().reshape(b, hq, d).float()
    cos = torch.nn.functional.cosine_similarity(a.flatten(), g.flatten(), dim=0).item()
    return fold, gqa, cos, (k, v, q_fold)


def kvarn_step(case: bd.KVarNCase, cfg: config.KVarNConfig, max_model_len: int = 131072, ops=None):
    """One layer's decode step on the case (step.decode_step): what the backend runs per layer,
    writing into an output buffer as the backend's does.
    ``ops``: the KVarN package to run (default the tree's; probe_host.py --past passes a past one)."""
    import importlib

    name = ops.__name__ if ops is not None else "kvarn_ops"
    step = importlib.import_module(f"{name}.step")
    DecodeWorkspace = importlib.import_module(f"{name}.triton_decode").DecodeWorkspace

    b, d, g = case.b, case.d, case.lay.group
    # the pool slots an engine of b sequences and 8192 batched tokens keeps (kvarn_pool.py)
    slots = b * 3 + -(-8192 // g)
    flush_by_slot = torch.full((slots,), -1, dtype=torch.int32, device="cuda")
    write_slots = torch.arange(b, 2 * b, dtype=torch.int64, device="cuda")  # the tail's slot
    write_rows = torch.full((b,), (case.ctx - 1) % g, dtype=torch.int64, device="cuda")
    key = torch.randn(b, case.hkv, d, device="cuda").half()
    value = torch.randn_like(key)
    launch = step.fixed_launch(b, case.hkv, d, max_model_len, g, cfg, case.q.device)
    ws = DecodeWorkspace()
    out = torch.empty_like(case.q)  # the backend hands the step its output buffer (out=)

    def run():
        return step.decode_step(
            case.q, key, value, case.cache, case.pool_k, case.pool_v, case.h16, flush_by_slot,
            write_slots, write_rows, case.slot, case.table, case.seq_lens, case.comp_end,
            case.lay, cfg, d**-0.5, launch, max_model_len=max_model_len, workspace=ws, out=out,
        )  # fmt: skip

    return run


def sdpa_step(b: int, ctx: int, d: int, hq: int, hkv: int):
    """fp16's decode step: each request's new K/V token written into its cache, then SDPA (the
    faster call of the two is taken from the attention-only rows; here the GQA one)."""
    fold, gqa, cos, (k, v, q_fold) = sdpa_calls(b, ctx, d, hq, hkv)
    new_k = torch.randn(b, hkv, 1, d, dtype=torch.float16, device="cuda")
    new_v = torch.randn_like(new_k)
    pos = torch.full((1,), ctx - 1, dtype=torch.int64, device="cuda")

    def fold_step():
        k.index_copy_(2, pos, new_k)
        v.index_copy_(2, pos, new_v)
        return fold()

    def gqa_step():
        k.index_copy_(2, pos, new_k)
        v.index_copy_(2, pos, new_v)
        return gqa()

    return fold_step, gqa_step, cos, (k, v, q_fold)


def eager_ab(cfg: config.KVarNConfig, batches: list[int], contexts: list[int], rounds: int):
    """The eager step back to back, KVarN's and fp16 SDPA-GQA's side by side: both built at once
    and timed in alternating order over ``rounds`` rounds (this host's speed drifts by 1.5x
    between minutes, so a ratio of two timings taken apart says little). Per row: the medians of
    each and the median (min-max) of the per-round ratios."""
    rows = []
    for d, hq, hkv in bd.SHAPES:
        for b in batches:
            for ctx in contexts:
                case = bd.KVarNCase(b, ctx, d, hq, hkv)
                kv = kvarn_step(case, cfg)
                _, gqa, _, keep = sdpa_step(b, ctx, d, hq, hkv)
                kv(), gqa()
                times: dict[str, list[float]] = {"kvarn": [], "gqa": []}
                hosts: dict[str, list[float]] = {"kvarn": [], "gqa": []}
                for r in range(rounds):
                    for name in ("kvarn", "gqa") if r % 2 == 0 else ("gqa", "kvarn"):
                        b2b, host = back_to_back(kv if name == "kvarn" else gqa)
                        times[name].append(b2b * 1e6)
                        hosts[name].append(host * 1e6)
                ratios = sorted(g / k for g, k in zip(times["gqa"], times["kvarn"], strict=True))
                med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
                row = {"D": d, "Hq": hq, "Hkv": hkv, "batch": b, "ctx": ctx, "rounds": rounds,
                       "kvarn_b2b_us": med(times["kvarn"]), "sdpa_gqa_b2b_us": med(times["gqa"]),
                       "kvarn_host_us": med(hosts["kvarn"]), "sdpa_gqa_host_us": med(hosts["gqa"]),
                       "ratio_median": med(ratios), "ratio_min": ratios[0],
                       "ratio_max": ratios[-1]}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
                del case, kv, gqa, keep
                torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--contexts", default="8192,32768,131072")
    ap.add_argument("--launch", default=None, help="kvarn_ops.launch.MODE: on, off or check")
    ap.add_argument("--step", action="store_true", help="time a layer's whole decode step")
    ap.add_argument(
        "--eager-ab",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="only the eager step back to back, KVarN and SDPA-GQA alternating over ROUNDS rounds",
    )
    args = ap.parse_args()
    if args.launch:
        from kvarn_ops import launch

        launch.MODE = args.launch
    cfg = config.KVarNConfig.from_env(os.environ)
    props = torch.cuda.get_device_properties(0)
    meta = {
        "device": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "preset": bd.PRESET,
        "launch": args.launch or "default",
        "what": (
            "a layer's decode step, eager back to back, alternating"
            if args.eager_ab
            else "a layer's decode step"
            if args.step
            else "the attention call"
        ),
    }
    print(json.dumps(meta), flush=True)
    if args.eager_ab:
        batches = list(map(int, args.batches.split(",")))
        contexts = list(map(int, args.contexts.split(",")))
        rows = eager_ab(cfg, batches, contexts, args.eager_ab)
        with open(os.path.join(args.out, "serving-eager-ab.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        return
    rows = []
    for d, hq, hkv in bd.SHAPES:
        for b in map(int, args.batches.split(",")):
            for ctx in map(int, args.contexts.split(",")):
                case = bd.KVarNCase(b, ctx, d, hq, hkv)
                kv = kvarn_step(case, cfg) if args.step else case.runner(cfg)
                kv()
                row: dict = {"D": d, "Hq": hq, "Hkv": hkv, "batch": b, "ctx": ctx}
                row["kvarn_graph_us"] = bd.bench(kv) * 1e6
                row["kvarn_eager_us"] = eager(kv) * 1e6
                b2b, host = back_to_back(kv)
                row["kvarn_b2b_us"], row["kvarn_host_us"] = b2b * 1e6, host * 1e6
                del case, kv
                torch.cuda.empty_cache()
                fold, gqa, cos, keep = (sdpa_step if args.step else sdpa_calls)(b, ctx, d, hq, hkv)
                row["sdpa_fold_graph_us"] = bd.bench(fold) * 1e6
                row["sdpa_gqa_graph_us"] = bd.bench(gqa) * 1e6
                row["sdpa_gqa_eager_us"] = eager(gqa) * 1e6
                b2b, host = back_to_back(gqa)
                row["sdpa_gqa_b2b_us"], row["sdpa_gqa_host_us"] = b2b * 1e6, host * 1e6
                row["sdpa_fold_vs_gqa_cos"] = cos
                best = min(row["sdpa_fold_graph_us"], row["sdpa_gqa_graph_us"])
                row["best_sdpa_graph_us"] = best
                row["best_sdpa_call"] = (
                    "fold" if row["sdpa_fold_graph_us"] <= row["sdpa_gqa_graph_us"] else "gqa"
                )
                row["graph_speedup"] = best / row["kvarn_graph_us"]
                row["b2b_speedup"] = row["sdpa_gqa_b2b_us"] / row["kvarn_b2b_us"]
                del fold, gqa, keep
                torch.cuda.empty_cache()
                rows.append(row)
                print(json.dumps(row), flush=True)
    name = "serving-step" if args.step else "serving"
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    write_md(os.path.join(args.out, f"{name}.md"), meta, rows)


def write_md(path: str, meta: dict, rows: list[dict]) -> None:
    lines = [
        f"{meta['device']}, {meta['sms']} SMs, torch {meta['torch']}, Triton {meta['triton']}; "
        f"preset {meta['preset']}; KVarN launch mode {meta['launch']}; timed: {meta['what']}. "
        "µs per call.",
        "",
        "| D | Hq/Hkv | batch | ctx | KVarN graph | SDPA fold graph | SDPA GQA graph | best SDPA "
        "/ KVarN (graph) | KVarN eager | SDPA GQA eager | KVarN back to back | SDPA GQA back to "
        "back | GQA / KVarN (back to back) | KVarN host | SDPA GQA host |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['D']} | {r['Hq']}/{r['Hkv']} | {r['batch']} | {r['ctx'] // 1024}K | "
            f"{r['kvarn_graph_us']:.1f} | {r['sdpa_fold_graph_us']:.1f} | "
            f"{r['sdpa_gqa_graph_us']:.1f} | {r['graph_speedup']:.2f}× ({r['best_sdpa_call']}) | "
            f"{r['kvarn_eager_us']:.1f} | {r['sdpa_gqa_eager_us']:.1f} | {r['kvarn_b2b_us']:.1f} | "
            f"{r['sdpa_gqa_b2b_us']:.1f} | {r['b2b_speedup']:.2f}× | {r['kvarn_host_us']:.1f} | "
            f"{r['sdpa_gqa_host_us']:.1f} |"
        )
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
