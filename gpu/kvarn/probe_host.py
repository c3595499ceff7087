"""Where the host time of one ``kvarn_decode`` call goes (issue #24: 108-232 µs a call in run 25).

    python3 gpu/kvarn/probe_host.py --out DIR [--batch 1] [--ctx 8192] [--head-size 128] [--step]

``--floor``: only the host cost of one launch down each path (Triton's, ``launch.launch``, the
compiled kernel's launcher, its C function with tensors or integer pointers).
``--past DIR``: the same calls through a past copy of the package (DIR holds its folder, e.g.
``git archive e8bc76f kvarn/files/vllm/v1/attention/ops/kvarn | tar -x -C build/past`` and DIR =
build/past/kvarn/files/vllm/v1/attention/ops/kvarn), interleaved with the tree's in one process
(A/B: ``kvarn_decode`` and the step, 7 rounds, medians), and the tree's ``kvarn_decode`` taken
apart: its bound launch alone, its two ``launch.launch`` calls alone, its two compiled launchers alone.
``--step``: the call profiled is a layer's whole decode step (bench_serving.kvarn_step: flush, write,
decode and combine), not ``kvarn_decode`` alone.

Prints and writes DIR/host_profile.txt: the host µs per call (50 calls, no synchronize in between)
of the whole call and of its pieces, then a cProfile of 300 calls sorted by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

import bench_decode as bd
import torch
import triton
from kvarn_ops import config


@triton.jit
def _empty(x_ptr):
    pass


@triton.jit
def _empty24(
    p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11,
    i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, i10, i11,
):  # fmt: skip
    pass


def launch_floor() -> list[str]:
    """The host cost of one launch of a kernel shaped like the decode's (12 pointers, 12 integers)
    down each path from Triton's own to the C launcher called directly with integer pointers."""
    from kvarn_ops import launch as fast

    ts = [torch.empty(16, device="cuda") for _ in range(12)]
    ints = [4096 * (i + 1) for i in range(12)]
    args = (*ts, *ints)
    compiled = _empty24[(1,)](*args)
    run = compiled.run
    stream = torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
    fn, meta = compiled.function, compiled.packed_metadata
    ptrs = (*[t.data_ptr() for t in ts], *ints)
    c = run.launch
    coop, pdl = run.launch_cooperative_grid, run.launch_pdl
    paths = {
        "Triton kernel[grid](...)": lambda: _empty24[(1,)](*args),
        "launch.launch": lambda: fast.launch(_empty24, (1,), args, {}),
        "compiled.run, tensors": lambda: compiled.run(1, 1, 1, stream, fn, meta, None, None, None, *args),
        "compiled.run, int pointers": lambda: run(1, 1, 1, stream, fn, meta, None, None, None, *ptrs),
        "C launcher, tensors": lambda: c(1, 1, 1, stream, fn, coop, pdl, None, None, meta, None, None, None, *args),
        "C launcher, int pointers": lambda: c(1, 1, 1, stream, fn, coop, pdl, None, None, meta, None, None, None, *ptrs),
        "12 x data_ptr()": lambda: [t.data_ptr() for t in ts],
        "current raw stream": lambda: torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice()),
    }  # fmt: skip
    return [f"{name}: {host_us(f, 200):.2f} us/call" for name, f in paths.items()]


def host_us(fn, n: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - start) / n * 1e6)
        torch.cuda.synchronize()
    return sorted(best)[2]


def past_ab(where: str, b: int, ctx: int, d: int) -> list[str]:
    import importlib
    from pathlib import Path

    import bench_serving
    import kvarn_ops
    from conftest import load_package

    past = load_package("kvarn_ops_past", Path(where).resolve())
    past_decode = importlib.import_module("kvarn_ops_past.triton_decode")
    hq, hkv = next((h, k) for dd, h, k in bd.SHAPES if dd == d)
    cfg = config.KVarNConfig.from_env(os.environ)
    case = bd.KVarNCase(b, ctx, d, hq, hkv)
    ws = kvarn_ops.triton_decode.DecodeWorkspace()
    calls = {
        "kvarn_decode, tree": case.runner(cfg, ws=ws),
        "kvarn_decode, past": case.runner(cfg, mod=past_decode),
        "step, tree": bench_serving.kvarn_step(case, cfg),
        "step, past": bench_serving.kvarn_step(case, cfg, ops=past),
    }
    for f in calls.values():
        f()
    # The tree's kvarn_decode taken apart: its bound launch, then what it hands launch.launch
    td = kvarn_ops.triton_decode
    (bound,) = ws.launches.values()
    warps = td.choose_warps(b, hkv, -(-ctx // case.lay.group), td._num_sms(case.q.device), cfg, d)
    splits = td.choose_splits(
        b, hkv, -(-ctx // case.lay.group), td._num_sms(case.q.device), cfg, warps
    )
    heads = 1 if b * hq <= td.COMBINE_PER_HEAD_ROWS else 16
    res = torch.empty_like(case.q)
    args = (
        case.q,
        case.slot,
        case.table,
        case.seq_lens,
        case.comp_end,
        warps,
        splits,
        heads,
        True,
        res,
    )
    calls["bound launch (_Launch) alone"] = lambda: bound(*args)
    seen = []
    real = td.launch
    td.launch = lambda *a, **k: seen.append((a, k)) or real(*a, **k)
    bound(*args)
    td.launch = real
    calls["its two launch.launch calls"] = lambda: [real(*a, **k) for a, k in seen]
    fast = kvarn_ops.launch
    fast._CACHE.clear()
    bound(*args)  # refills the fast path's cache with exactly these two launches, in order
    hits = [
        (ent[0], (*a[1], 1, 1)[:3], a[2], ent[3])
        for (a, _), ent in zip(seen, fast._CACHE.values(), strict=True)
    ]
    stream = torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
    calls["their two compiled launchers"] = lambda: [
        c.launch(*g, stream, *c.head, *la, *t) for c, g, la, t in hits
    ]
    # which launcher each of the two takes: Triton's C function directly, or CompiledKernel.run
    # (a Python call that allocates the kernel's scratch memory first)
    kinds = []
    for (a, _), ent in zip(seen, fast._CACHE.values(), strict=True):
        run = ent[0].launch
        scratch = getattr(run, "global_scratch_size", None)
        via = "C launcher" if scratch is None else f"CompiledKernel.run (scratch {scratch} B)"
        kinds.append(f"{a[0].fn.__name__}: {via}")
    rounds: dict[str, list[float]] = {n: [] for n in calls}
    names = list(calls)
    for r in range(7):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            rounds[n].append(host_us(calls[n]))
    lines = [f"b={b} ctx={ctx} D={d}: host us per call, median of 7 interleaved rounds (min-max)"]
    lines.append("launchers: " + "; ".join(kinds))
    for n, v in rounds.items():
        v.sort()
        lines.append(f"{n}: {v[3]:.1f} ({v[0]:.1f}-{v[-1]:.1f})")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--head-size", type=int, default=128)
    ap.add_argument("--launch", default=None, help="kvarn_ops.launch.MODE: on, off or check")
    ap.add_argument("--step", action="store_true", help="profile a layer's whole decode step")
    ap.add_argument("--floor", action="store_true", help="only the launch paths' host cost")
    ap.add_argument("--past", default=None, help="a past copy of the package's folder: A/B")
    args = ap.parse_args()
    if args.launch:
        from kvarn_ops import launch

        launch.MODE = args.launch
    if args.floor:
        text = "\n".join(launch_floor())
        print(text)
        with open(os.path.join(args.out, "launch_floor.txt"), "w") as f:
            f.write(text + "\n")
        return
    if args.past:
        text = "\n".join(past_ab(args.past, args.batch, args.ctx, args.head_size))
        print(text)
        with open(os.path.join(args.out, f"host_ab_d{args.head_size}.txt"), "w") as f:
            f.write(text + "\n")
        return
    d = args.head_size
    hq, hkv = next((h, k) for dd, h, k in bd.SHAPES if dd == d)
    cfg = config.KVarNConfig.from_env(os.environ)
    case = bd.KVarNCase(args.batch, args.ctx, d, hq, hkv)
    if args.step:
        import bench_serving

        call = bench_serving.kvarn_step(case, cfg)
    else:
        call = case.runner(cfg)
    call()
    x = torch.empty(16, device="cuda")
    lines = []
    what = "a layer's decode step" if args.step else "whole kvarn_decode"
    lines.append(f"{what}: {host_us(call):.1f} us/call")
    lines.append(f"empty Triton kernel launch: {host_us(lambda: _empty[(1,)](x)):.1f} us/call")
    from kvarn_ops import launch as fast

    lines.append(
        "empty kernel through launch.launch: "
        f"{host_us(lambda: fast.launch(_empty, (1,), (x,), {})):.1f} us/call"
    )
    lines.append(
        f"torch.empty(1,32,128): {host_us(lambda: torch.empty(1, 32, 128, device='cuda')):.1f} us/call"
    )
    lines.append(
        f"get_device_properties: {host_us(lambda: torch.cuda.get_device_properties(x.device)):.1f} us"
    )
    lines.append(
        f"get_device_capability: {host_us(lambda: torch.cuda.get_device_capability(x.device)):.1f} us"
    )
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        call()
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(35)
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(35)
    text = "\n".join(lines) + "\n\n" + buf.getvalue()
    print(text)
    with open(os.path.join(args.out, "host_profile.txt"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
