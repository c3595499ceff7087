"""Driver versus allocator deltas across CUDA graph captures.

The reproduction behind the `cudagraph-memory-from-allocator` row. vLLM 0.29.0 measures its graph
pool as the drop in the driver's free memory around capture; the row reads the caching allocator's
reserved bytes instead. This script shows what each one sees (vLLM itself needs torch 2.13; the GPU
machine has 2.11, so the capture brackets are copied here):

1. `graphs`: many small graphs captured into one shared pool, like vLLM's global pool, with
   in-place kernels (the allocator has nothing to hand out) and out-of-place ones (the pool grows).
   Per configuration: total driver delta, total allocator delta, the residue per graph and per kernel
   node, and whether the 1 MiB per-graph floor of the FULL extrapolation covers the residue.
2. `foreign`: the defect's mechanism. Work that is not graph memory but lands inside a capture
   bracket (fresh Triton kernels compiled and loaded, a buffer taken outside the caching allocator):
   the driver delta counts it, the allocator delta does not.
3. `compile`: a capture bracket as capture_model() draws it, around a torch.compile'd function that
   is compiled (max-autotune) and then captured, with empty Inductor/Triton caches and with warm ones.

Each case runs in a fresh process (`--case`), so memory the driver keeps from an earlier case (it
reuses freed graph memory without returning it) does not hide the next case's cost.

Usage: python3 gpu/memory/graph_capture.py --out DIR   (writes DIR/graph_capture.json and prints it)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MiB = 1 << 20


def bracket() -> tuple[int, int]:
    """(driver free bytes, allocator reserved bytes), after a synchronize, as vLLM reads them."""
    import torch

    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()


def capture_many(steps: int, graphs: int, inplace: bool) -> dict[str, Any]:
    import torch

    pool = torch.cuda.graph_pool_handle()
    static = torch.zeros(4096, device="cuda")
    keep: list[torch.cuda.CUDAGraph] = []

    def body() -> None:
        if inplace:
            for _ in range(steps):
                static.add_(1.0)
        else:
            y = static
            for _ in range(steps):
                y = y * 1.0001 + 1.0
            static.copy_(y)

    # One warm-up graph, uncounted: the first capture sets up the graph machinery.
    body()
    warm = torch.cuda.CUDAGraph()
    with torch.cuda.graph(warm, pool=pool):
        body()
    keep.append(warm)

    free0, res0 = bracket()
    samples: list[tuple[int, int]] = []
    for _ in range(graphs):
        fb, rb = bracket()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            body()
        fa, ra = bracket()
        samples.append((fb - fa, ra - rb))
        keep.append(g)
    free1, res1 = bracket()
    driver = free0 - free1
    allocator = res1 - res0
    residue = driver - allocator
    per_graph = residue / graphs
    # In place: one add_ kernel per step. Out of place: a mul and an add per step, one copy_.
    kernel_nodes = steps if inplace else 2 * steps + 1
    per_node = per_graph / kernel_nodes
    out = {
        "steps_per_graph": steps,
        "kernel_nodes_per_graph": kernel_nodes,
        "graphs": graphs,
        "kernels": "in-place" if inplace else "out-of-place",
        "driver_mib": round(driver / MiB, 2),
        "allocator_mib": round(allocator / MiB, 2),
        "residue_mib": round(residue / MiB, 2),
        "residue_per_graph_kib": round(per_graph / 1024, 1),
        "residue_per_node_bytes": round(per_node, 1),
        "floor_1mib_covers": per_graph <= MiB,
        # The 2nd sample is what vLLM's extrapolation takes as the per-graph cost.
        "sample2_driver_kib": round(samples[1][0] / 1024, 1),
        "sample2_allocator_kib": round(samples[1][1] / 1024, 1),
        "samples_nonzero_driver": sum(1 for d, _ in samples if d),
    }
    del keep, warm
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return out


def foreign_memory(kernels: int) -> dict[str, Any]:
    """Memory the driver sees but the allocator does not, inside one bracket."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=m) * FACTOR, mask=m)

    x = torch.ones(1 << 16, device="cuda")
    fb, rb = bracket()
    for k in range(kernels):  # each FACTOR is a new specialisation: compiled and loaded now
        scale[(x.numel() // 1024,)](x, x.numel(), FACTOR=1.0 + k * 1e-6, BLOCK=1024)
    fa, ra = bracket()
    triton_row = {
        "what": f"{kernels} freshly compiled Triton kernels loaded inside the bracket",
        "driver_mib": round((fb - fa) / MiB, 2),
        "allocator_mib": round((ra - rb) / MiB, 2),
    }

    # A buffer taken outside the caching allocator (as NCCL or a library workspace would):
    # torch.cuda.MemPool is not it, so use the CUDA runtime through cuda-python when present.
    outside_row: dict[str, Any] = {"what": "256 MiB cudaMalloc outside the caching allocator"}
    try:
        from cuda.bindings import runtime as cudart

        fb, rb = bracket()
        err, ptr = cudart.cudaMalloc(256 * MiB)
        fa, ra = bracket()
        outside_row |= {
            "driver_mib": round((fb - fa) / MiB, 2),
            "allocator_mib": round((ra - rb) / MiB, 2),
            "error": str(err) if int(err) else None,
        }
        cudart.cudaFree(ptr)
    except Exception as exc:  # reported, not fatal: the Triton row already shows the mechanism
        outside_row["error"] = repr(exc)
    return {"triton": triton_row, "outside_allocator": outside_row}


def compile_in_bracket() -> dict[str, Any]:
    """Compile (cold or warm, per the caches in the environment) and capture inside one bracket."""
    import torch

    w1 = torch.randn(2048, 8192, device="cuda", dtype=torch.bfloat16)
    w2 = torch.randn(8192, 2048, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.silu(x @ w1) @ w2

    f = torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)
    gc.collect()
    torch.cuda.empty_cache()  # as capture_model() does before its first read
    fb, rb = bracket()
    with torch.inference_mode():
        f(x)  # compiles (and autotunes) here when the caches are cold
        fm, rm = bracket()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # its __enter__ empties the allocator cache, as in vLLM
            y = f(x)
    fa, ra = bracket()
    del y
    return {
        "driver_mib": round((fb - fa) / MiB, 2),
        "allocator_mib": round((ra - rb) / MiB, 2),
        "after_compile_driver_mib": round((fb - fm) / MiB, 2),
        "after_compile_allocator_mib": round((rm - rb) / MiB, 2),
    }


CASES: dict[str, tuple[int, int, bool]] = {
    "inplace-10x200": (10, 200, True),
    "inplace-100x100": (100, 100, True),
    "inplace-400x50": (400, 50, True),
    "inplace-1000x50": (1000, 50, True),
    "outofplace-100x50": (100, 50, False),
    "outofplace-400x50": (400, 50, False),
    "outofplace-1000x50": (1000, 50, False),
}


def run_case(case: str) -> dict[str, Any]:
    import torch

    torch.zeros(1, device="cuda")
    if case in CASES:
        return capture_many(*CASES[case])
    if case == "foreign":
        return foreign_memory(64)
    return compile_in_bracket()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--case")
    args = p.parse_args()
    if args.case:
        print(json.dumps({"case": args.case} | run_case(args.case)))
        return 0

    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cases": [],
    }
    cache = Path(tempfile.mkdtemp(prefix="gc-cache-"))
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
    env["TRITON_CACHE_DIR"] = str(cache / "triton")
    plan = [*CASES, "foreign", "compile-cold", "compile-warm"]
    for case in plan:
        cmd = [sys.executable, __file__, "--out", str(args.out), "--case", case]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
            if proc.returncode == 0:
                row = json.loads(proc.stdout.strip().splitlines()[-1])
            else:
                row = {"case": case, "error": proc.stderr[-3000:]}
        except subprocess.TimeoutExpired:
            row = {"case": case, "error": "timed out after 240 s"}
        report["cases"].append(row)
        print(json.dumps(row), flush=True)
    (args.out / "graph_capture.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0 if all("error" not in r for r in report["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
