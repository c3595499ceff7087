"""KVarN's decode step against the decode kernels a vLLM 0.29.0 user would keep instead (issue #40):
FlashInfer's paged decode on fp16 and fp8 (e4m3) caches, with and without tensor cores, beside
torch SDPA-GQA on an fp16 cache, all in one process on the same shapes.

Per (D, batch, context), each side one layer's decode step (the new token written, then attention):

- **KVarN**: ``ops/kvarn/step.decode_step`` (bench_serving.kvarn_step: the path the backend takes);
- **SDPA-GQA**: the token written into a dense fp16 cache, then SDPA with ``enable_gqa=True``
  (bench_serving.sdpa_step);
- **FlashInfer** (0.6.18, the version vLLM 0.29.0 pins): a paged cache of page size 16 (vLLM's
  default block size for FlashInfer), NHD layout ``[pages, 2, 16, Hkv, D]`` as vLLM's backend keeps
  it, a shuffled page table, the token written into its page, then
  ``BatchDecodeWithPagedKVCacheWrapper.run``: wrapper built with ``use_cuda_graph=True``, planned
  once; fp16 and fp8 e4m3 (scales 1.0), ``use_tensor_cores`` off and on.

Every column: the step captured in a CUDA graph and replayed, L2 flushed (a 256 MiB write) before each
replay, the median of 50 (CUDA events); "eager": the same with the step launched from Python.
"best baseline" is the fastest graph time among SDPA-GQA and the four FlashInfer columns; the ratio
is best baseline / KVarN (above 1: KVarN faster). KVarN's host time (``kvarn_decode`` alone, as
issue #24's probe took it, and the whole step) is taken per row (bench_serving.back_to_back),
with a host calibration (one small torch op's launch) so a slow host shows as one.

    python3 gpu/kvarn/bench_baselines.py --out DIR [--batches 1,8,32,128]
        [--contexts 8192,32768,131072] [--deadline SECONDS] [--profile 1x8192]

Writes DIR/baselines.jsonl (a line per row as it finishes, so a run stopped by its cap keeps what it
measured), DIR/baselines.json, DIR/baselines.md, and with --profile DIR/profile.json (torch.profiler
kernel times of KVarN's step and FlashInfer's fp8 tensor-core step, both D, eager calls). A column
that cannot run (FlashInfer missing, a JIT failure, out of memory) is kept as its error string.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback

import torch

SEED = 40  # torch.manual_seed before each row: the random caches, tables and queries are fixed
PAGE = 16  # vLLM's block size for FlashInfer
FLUSH_BYTES = 256 << 20  # > the H200's 60 MB L2
REPS = 50
WARM_S = 240.0  # FlashInfer's JIT compiles, all variants at once, at most this long
FI_VARIANTS = (  # (column, kv dtype name, use_tensor_cores)
    ("fi_fp16", "fp16", False),
    ("fi_fp8", "fp8", False),
    ("fi_fp16_tc", "fp16", True),
    ("fi_fp8_tc", "fp8", True),
)
BASELINES = ("sdpa_gqa", *(v[0] for v in FI_VARIANTS))


# -- pure parts (tested on the CPU: tests_vllm/kvarn/test_bench_baselines.py) ----------------------


def page_table(b: int, ctx: int, page: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """A shuffled page table of b requests of ctx tokens: FlashInfer's indptr/indices/last_page_len,
    and where each request's newest token lives (its last page and the offset in it)."""
    per = -(-ctx // page)
    indices = torch.randperm(b * per, generator=gen).to(torch.int32)
    indptr = torch.arange(b + 1, dtype=torch.int32) * per
    last_len = torch.full((b,), ctx - (per - 1) * page, dtype=torch.int32)
    last_page = indices.view(b, per)[:, -1].long()
    return {"indptr": indptr, "indices": indices, "last_page_len": last_len,
            "last_page": last_page, "last_off": (last_len - 1).long()}  # fmt: skip


def best_baseline(row: dict) -> tuple[str | None, float | None]:
    """(column, graph µs) of the fastest baseline that ran on this row; (None, None) if none did."""
    ran = [(row[f"{c}_graph_us"], c) for c in BASELINES if _num(row.get(f"{c}_graph_us"))]
    if not ran:
        return None, None
    t, c = min(ran)
    return c, t


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cell(v) -> str:
    if _num(v):
        return f"{v:.1f}"
    return "n/a" if v is None else str(v)


def _col(row: dict, name: str):
    """A column's value: its timing, or "error" where its side (``kvarn``, ``fi_fp8_tc``...) failed."""
    side = name.rsplit("_", 1)[0]
    return "error" if f"{side}_error" in row else row.get(f"{name}_us")


def table_md(meta: dict, rows: list[dict]) -> str:
    lines = [
        f"{meta['device']}, {meta['sms']} SMs, torch {meta['torch']}, Triton {meta['triton']}, "
        f"FlashInfer {meta['flashinfer']}; preset {meta['preset']}; a layer's decode step, µs, "
        f"CUDA graph replay (L2 flushed, median of {REPS}) unless marked eager.",
        "",
        "| D | Hq/Hkv | batch | ctx | KVarN | KVarN eager | SDPA-GQA | SDPA-GQA eager | FI fp16 | "
        "FI fp8 | FI fp16 TC | FI fp8 TC | FI fp8 TC eager | best baseline | best / KVarN | "
        "KVarN host (decode / step) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| {r['D']} | {r['Hq']}/{r['Hkv']} | {r['batch']} | {r['ctx'] // 1024}K |"
        if r.get("skipped"):
            lines.append(f"{head} skipped: {r['skipped']} |" + " |" * 11)
            continue
        c, t = best_baseline(r)
        k = r.get("kvarn_graph_us")
        best = f"{t:.1f} ({c})" if c else "none ran"
        ratio = f"{t / k:.2f}×" if c and _num(k) else "n/a"
        host = f"{_cell(r.get('kvarn_decode_host_us'))} / {_cell(r.get('kvarn_step_host_us'))}"
        cells = [_col(r, n) for n in (
            "kvarn_graph", "kvarn_eager", "sdpa_gqa_graph", "sdpa_gqa_eager", "fi_fp16_graph",
            "fi_fp8_graph", "fi_fp16_tc_graph", "fi_fp8_tc_graph", "fi_fp8_tc_eager")]  # fmt: skip
        lines.append(f"{head} " + " | ".join(map(_cell, cells)) + f" | {best} | {ratio} | {host} |")
    errors = sorted({f"{k}: {v}" for r in rows for k, v in r.items() if k.endswith("_error")})
    if errors:
        lines += ["", "Errors (columns shown as 'error'):", ""] + [f"- {e}" for e in errors]
    return "\n".join(lines) + "\n"


# -- the device side -----------------------------------------------------------------------------


class Timer:
    """Median of REPS CUDA-event timings, the L2 flushed before each."""

    def __init__(self) -> None:
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def median_us(self, fn, reps: int = REPS) -> float:
        for _ in range(3):
            fn()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]  # fmt: skip
        for a, b in ev:
            self.flush.zero_()
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in ev) * 1e3

    def graph_us(self, fn) -> float:
        fn()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        try:
            return self.median_us(g.replay)
        finally:
            del g


def fi_cache(b: int, ctx: int, d: int, hkv: int, kv: str, tbl: dict) -> torch.Tensor:
    """vLLM's FlashInfer cache layout, [pages, 2, PAGE, Hkv, D], random values (fp8: cast in
    chunks, so the fp16 copy of a 128K batch-128 cache is never whole in memory)."""
    pages = int(tbl["indices"].numel())
    dtype = torch.float16 if kv == "fp16" else torch.float8_e4m3fn
    cache = torch.empty(pages, 2, PAGE, hkv, d, dtype=dtype, device="cuda")
    if kv == "fp16":
        return cache.normal_()
    step = max(1, (1 << 30) // (2 * PAGE * hkv * d * 2))
    for i in range(0, pages, step):
        cache[i : i + step].copy_(torch.randn_like(cache[i : i + step], dtype=torch.float16))
    return cache


def fi_step(flashinfer, cache: torch.Tensor, tbl: dict, hq: int, d: int, tc: bool):
    """A FlashInfer decode step: plan once (graph mode: fixed buffers), then each call writes every
    request's new token into its last page and runs the wrapper."""
    b = int(tbl["last_page"].numel())
    hkv = cache.shape[3]
    dev = cache.device
    t = {k: v.to(dev) for k, v in tbl.items()}
    ws = torch.zeros(512 << 20, dtype=torch.uint8, device=dev)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        ws, "NHD", use_cuda_graph=True, use_tensor_cores=tc,
        paged_kv_indptr_buffer=t["indptr"], paged_kv_indices_buffer=t["indices"],
        paged_kv_last_page_len_buffer=t["last_page_len"],
    )  # fmt: skip
    w.plan(
        t["indptr"], t["indices"], t["last_page_len"], hq, hkv, d, PAGE,
        q_data_type=torch.float16, kv_data_type=cache.dtype, sm_scale=d**-0.5,
    )  # fmt: skip
    q = torch.randn(b, hq, d, dtype=torch.float16, device=dev)
    new_k = torch.randn(b, hkv, d, dtype=torch.float16, device=dev).to(cache.dtype)
    new_v = torch.randn_like(new_k, dtype=torch.float16).to(cache.dtype)
    out = torch.empty_like(q)
    scales = {} if cache.dtype == torch.float16 else {"k_scale": 1.0, "v_scale": 1.0}
    pg, off = t["last_page"], t["last_off"]
    # the token's bytes written through a uint8 view: index_put has no fp8 kernel
    raw, raw_k, raw_v = cache.view(torch.uint8), new_k.view(torch.uint8), new_v.view(torch.uint8)

    def run():
        raw[pg, 0, off] = raw_k
        raw[pg, 1, off] = raw_v
        return w.run(q, cache, out=out, **scales)

    return run  # its closure keeps the wrapper (and the wrapper its workspace)


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def host_calibration() -> float:
    """Host µs of one small torch op's launch (median of 5 × 200): how fast this host is now."""
    import bench_serving as bs

    x = torch.zeros(16, device="cuda")
    return bs.back_to_back(lambda: x.add_(1), n=200)[1] * 1e6


def measure_row(d, hq, hkv, b, ctx, cfg, timer, flashinfer, fi_error) -> dict:
    import bench_decode as bd
    import bench_serving as bs

    row: dict = {"D": d, "Hq": hq, "Hkv": hkv, "batch": b, "ctx": ctx}
    torch.manual_seed(SEED)
    try:  # KVarN: the step, graph and eager; host time of kvarn_decode alone and of the step
        case = bd.KVarNCase(b, ctx, d, hq, hkv)
        step = bs.kvarn_step(case, cfg)
        row["kvarn_graph_us"] = timer.graph_us(step)
        row["kvarn_eager_us"] = timer.median_us(step)
        row["kvarn_step_host_us"] = bs.back_to_back(step)[1] * 1e6
        row["kvarn_decode_host_us"] = bs.back_to_back(case.runner(cfg))[1] * 1e6
    except Exception as e:
        row["kvarn_error"] = _err(e)
    finally:
        case = step = None
        torch.cuda.empty_cache()
    try:  # SDPA-GQA on a dense fp16 cache
        gqa = bs.sdpa_step(b, ctx, d, hq, hkv)[1]  # its closure holds the cache
        row["sdpa_gqa_graph_us"] = timer.graph_us(gqa)
        row["sdpa_gqa_eager_us"] = timer.median_us(gqa)
    except Exception as e:
        row["sdpa_gqa_error"] = _err(e)
    finally:
        gqa = None
        torch.cuda.empty_cache()
    gen = torch.Generator().manual_seed(SEED)
    tbl = page_table(b, ctx, PAGE, gen)
    for kv in ("fp16", "fp8"):
        cols = [(c, tc) for c, k, tc in FI_VARIANTS if k == kv]
        if flashinfer is None:
            for c, _ in cols:
                row[f"{c}_error"] = fi_error
            continue
        try:
            cache = fi_cache(b, ctx, d, hkv, kv, tbl)
        except Exception as e:
            for c, _ in cols:
                row[f"{c}_error"] = _err(e)
            continue
        for c, tc in cols:
            try:
                run = fi_step(flashinfer, cache, tbl, hq, d, tc)
                row[f"{c}_graph_us"] = timer.graph_us(run)
                row[f"{c}_eager_us"] = timer.median_us(run)
            except Exception as e:
                row[f"{c}_error"] = _err(e)
            finally:
                run = None
        cache = None
        torch.cuda.empty_cache()
    c, t = best_baseline(row)
    row["best_baseline"], row["best_baseline_us"] = c, t
    if c and "kvarn_graph_us" in row:
        row["best_over_kvarn"] = t / row["kvarn_graph_us"]
    return row


def profile_rows(specs, cfg, flashinfer) -> dict:
    """torch.profiler kernel times (µs per call, 20 eager calls) of KVarN's step and FlashInfer's
    fp8 tensor-core step at each (batch x ctx) of ``specs``, both head sizes."""
    import bench_decode as bd
    import bench_serving as bs
    from torch.profiler import ProfilerActivity, profile

    res: dict = {}
    for spec in specs:
        b, ctx = map(int, spec.split("x"))
        for d, hq, hkv in bd.SHAPES:
            torch.manual_seed(SEED)
            fns = {"kvarn_step": bs.kvarn_step(bd.KVarNCase(b, ctx, d, hq, hkv), cfg)}
            if flashinfer is not None:
                tbl = page_table(b, ctx, PAGE, torch.Generator().manual_seed(SEED))
                try:
                    fns["fi_fp8_tc"] = fi_step(
                        flashinfer, fi_cache(b, ctx, d, hkv, "fp8", tbl), tbl, hq, d, True
                    )
                except Exception as e:
                    res[f"D{d} b{b} {ctx // 1024}K fi_fp8_tc"] = _err(e)
            for name, fn in fns.items():
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        fn()
                    torch.cuda.synchronize()
                kernels = {
                    e.key[:120]: round(e.device_time_total / 20, 2)
                    for e in prof.key_averages()
                    if e.device_time_total > 0
                }
                res[f"D{d} b{b} {ctx // 1024}K {name}"] = dict(
                    sorted(kernels.items(), key=lambda kv: -kv[1])
                )
            fns = None
            torch.cuda.empty_cache()
    return res


def warm_one(d: int, kv: str, tc: int) -> None:
    """Compile (FlashInfer JITs with nvcc on first use) one variant on a tiny case."""
    import bench_decode as bd
    import flashinfer

    hq, hkv = next((q, k) for dd, q, k in bd.SHAPES if dd == d)
    tbl = page_table(2, 100, PAGE, torch.Generator().manual_seed(SEED))
    fi_step(flashinfer, fi_cache(2, 100, d, hkv, kv, tbl), tbl, hq, d, bool(tc))()
    torch.cuda.synchronize()


def warm_all() -> dict:
    """Every FlashInfer variant compiled at once, a process each (their nvcc runs overlap)."""
    import subprocess
    import sys

    jobs = [(d, kv, int(tc)) for d in (128, 256) for _, kv, tc in FI_VARIANTS]
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, __file__, "--warm-one", str(d), kv, str(tc)],
                              stderr=subprocess.PIPE, text=True) for d, kv, tc in jobs]  # fmt: skip
    res: dict = {}
    for (d, kv, tc), p in zip(jobs, procs, strict=True):
        try:
            err = p.communicate(timeout=max(1.0, WARM_S - (time.time() - t0)))[1]
            ok = p.returncode == 0
        except subprocess.TimeoutExpired:
            p.kill()
            err, ok = f"compile not done in {WARM_S:.0f} s", False
        res[f"D{d} {kv} tc={tc}"] = "ok" if ok else (err.strip().splitlines() or ["?"])[-1]
    res["seconds"] = round(time.time() - t0, 1)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm-one", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--no-warm", action="store_true", help="skip compiling FlashInfer up front")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--contexts", default="8192,32768,131072")
    ap.add_argument("--deadline", type=float, default=0, help="seconds; rows after it are skipped")
    ap.add_argument("--profile", default="", help="batch x ctx rows to profile, e.g. 1x8192")
    args = ap.parse_args()
    if args.warm_one:
        d, kv, tc = args.warm_one
        warm_one(int(d), kv, int(tc))
        return
    t0 = time.time()
    import bench_decode as bd  # loads kvarn_ops (through _load)
    import triton
    from kvarn_ops import config

    try:
        import flashinfer

        fi_version, fi_error = flashinfer.__version__, None
    except Exception as e:
        flashinfer, fi_version, fi_error = None, "not loaded", _err(e)
        traceback.print_exc()
    cfg = config.KVarNConfig.from_env(os.environ)
    props = torch.cuda.get_device_properties(0)
    meta = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "triton": triton.__version__, "flashinfer": fi_version, "flashinfer_error": fi_error,
            "preset": bd.PRESET, "seed": SEED, "page_size": PAGE, "reps": REPS,
            "host_calibration_us": host_calibration()}  # fmt: skip
    if flashinfer is not None and not args.no_warm:
        meta["flashinfer_warm"] = warm_all()
        bad = {k: v for k, v in meta["flashinfer_warm"].items() if k != "seconds" and v != "ok"}
        if bad:  # a variant that did not compile would compile (or fail) inside a timed row
            flashinfer, fi_error = None, f"FlashInfer JIT failed: {json.dumps(bad)[:400]}"
            meta["flashinfer_error"] = fi_error
    print(json.dumps(meta), flush=True)
    rows = []
    jsonl = open(os.path.join(args.out, "baselines.jsonl"), "w")  # noqa: SIM115  (line by line)
    # batch outermost: a run that reaches its deadline loses the largest (slowest) rows first
    for b in map(int, args.batches.split(",")):
        for d, hq, hkv in bd.SHAPES:
            for ctx in map(int, args.contexts.split(",")):
                if args.deadline and time.time() - t0 > args.deadline:
                    row = {"D": d, "Hq": hq, "Hkv": hkv, "batch": b, "ctx": ctx,
                           "skipped": f"past the run's {args.deadline:.0f} s deadline"}  # fmt: skip
                else:
                    row = measure_row(d, hq, hkv, b, ctx, cfg, Timer(), flashinfer, fi_error)
                    row["elapsed_s"] = round(time.time() - t0, 1)
                rows.append(row)
                jsonl.write(json.dumps(row) + "\n")
                jsonl.flush()
                print(json.dumps(row), flush=True)
    jsonl.close()
    meta["host_calibration_end_us"] = host_calibration()
    with open(os.path.join(args.out, "baselines.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "baselines.md"), "w") as f:
        f.write(table_md(meta, rows))
    if args.profile:
        prof = profile_rows(args.profile.split(","), cfg, flashinfer)
        with open(os.path.join(args.out, "profile.json"), "w") as f:
            json.dump(prof, f, indent=1)
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
