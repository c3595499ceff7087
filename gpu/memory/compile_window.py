"""Cold versus warm torch.compile inside a copy of vLLM 0.29.0's memory-profiling window.

The reproduction behind the `memory-profile-after-warmup` row. vLLM 0.29.0 sizes its KV cache from
`memory_profiling()` (vllm/utils/mem_utils.py) wrapped around the first `profile_run()`; on a cold
compile cache that first run also compiles and autotunes, and the scratch of that work is read as the
model's transient peak. This script runs a small `max-autotune` compiled model (vLLM itself needs torch
2.13, the GPU machine has 2.11, so the window is copied here, line for line in what it measures) in
fresh processes:

- `cold-pristine`: empty Inductor/Triton caches; a window around pass 1, then a window around pass 2
  (pass 1 is what vLLM 0.29.0 measures).
- `cold-patched`: empty caches; pass 1 uncounted, then gc.collect, synchronize, empty_cache, then a
  window around pass 2 (what the row does).
- `warm-pristine`: the caches `cold-pristine` left behind; a window around pass 1 and pass 2.

Usage: python3 gpu/memory/compile_window.py --out DIR   (writes DIR/compile_window.json and prints it)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MiB = 1 << 20


@dataclass
class Snapshot:
    """What vLLM's MemorySnapshot.measure() reads (allocator stats, driver free, reserved)."""

    torch_peak: int
    torch_allocated: int
    free_memory: int
    reserved: int


def measure() -> Snapshot:
    import torch

    # On CUDA, torch.accelerator.memory_stats/get_memory_info/memory_reserved (what vLLM calls)
    # dispatch to these.
    stats = torch.cuda.memory_stats()
    free, _total = torch.cuda.mem_get_info()
    return Snapshot(
        torch_peak=stats.get("allocated_bytes.all.peak", 0),
        torch_allocated=stats.get("allocated_bytes.all.current", 0),
        free_memory=free,
        reserved=torch.cuda.memory_reserved(),
    )


@contextlib.contextmanager
def memory_profiling(baseline: Snapshot) -> Iterator[dict[str, Any]]:
    """A copy of vllm.utils.mem_utils.memory_profiling (0.29.0, ~lines 233-326), figures only."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = measure()
    result: dict[str, Any] = {}
    yield result
    gc.collect()
    torch.cuda.empty_cache()
    after = measure()
    result["torch_peak_increase_mib"] = (after.torch_peak - before.torch_peak) / MiB
    result["total_consumed_mib"] = (baseline.free_memory - after.free_memory) / MiB
    result["transient_peak_headroom_mib"] = (after.torch_peak - after.torch_allocated) / MiB
    result["non_kv_cache_memory_mib"] = (
        result["total_consumed_mib"] + result["transient_peak_headroom_mib"]
    )


def build(tokens: int, hidden: int, ffn: int, layers: int) -> tuple[Callable[[], None], Any]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.RMSNorm(hidden)
            self.up = nn.Linear(hidden, ffn, bias=False)
            self.down = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(F.silu(self.up(self.norm(x))))

    model = nn.Sequential(*[Block() for _ in range(layers)]).to("cuda", torch.bfloat16)
    compiled = torch.compile(model, mode="max-autotune-no-cudagraphs", dynamic=False)
    # The input buffer is persistent, like vLLM's input buffers: made before the window.
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)

    def profile_run() -> None:
        with torch.inference_mode():
            y = compiled(x)
        torch.cuda.synchronize()
        del y

    return profile_run, model


def child(role: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.zeros(1, device="cuda")  # the CUDA context exists before the baseline, as in vLLM
    torch.cuda.synchronize()
    baseline = measure()  # vLLM's init_snapshot: before the model is built
    profile_run, _model = build(args.tokens, args.hidden, args.ffn, args.layers)
    weights_mib = (torch.cuda.memory_allocated() - baseline.torch_allocated) / MiB
    passes: list[dict[str, Any]] = []

    def window(label: str) -> None:
        t0 = time.perf_counter()
        with memory_profiling(baseline) as r:
            profile_run()
        r["pass"] = label
        r["seconds"] = round(time.perf_counter() - t0, 2)
        passes.append(r)

    if role == "cold-patched":
        t0 = time.perf_counter()
        profile_run()  # the row's uncounted warm-up pass
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        passes.append({"pass": "1 (uncounted)", "seconds": round(time.perf_counter() - t0, 2)})
        window("2 (measured)")
    else:
        window("1")
        window("2")
    return {"role": role, "weights_mib": weights_mib, "passes": passes}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--role", choices=["cold-pristine", "cold-patched", "warm-pristine"])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--ffn", type=int, default=8192)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--timeout", type=int, default=240)
    args = p.parse_args()

    if args.role:
        print(json.dumps(child(args.role, args)))
        return 0

    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "model": {k: getattr(args, k) for k in ("tokens", "hidden", "ffn", "layers")},
        "compile": "torch.compile(mode='max-autotune-no-cudagraphs', dynamic=False), bf16",
        "runs": [],
    }
    cold = Path(tempfile.mkdtemp(prefix="cold-"))
    cold2 = Path(tempfile.mkdtemp(prefix="cold2-"))
    plan = [("cold-pristine", cold), ("cold-patched", cold2), ("warm-pristine", cold)]
    for role, cache in plan:
        env = dict(os.environ)
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        env["TRITON_CACHE_DIR"] = str(cache / "triton")
        cmd = [sys.executable, __file__, "--out", str(args.out), "--role", role]
        for k in ("tokens", "hidden", "ffn", "layers"):
            cmd += [f"--{k}", str(getattr(args, k))]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        if proc.returncode != 0:
            report["runs"].append({"role": role, "error": proc.stderr[-4000:]})
            continue
        run = json.loads(proc.stdout.strip().splitlines()[-1])
        run["process_seconds"] = round(time.perf_counter() - t0, 1)
        report["runs"].append(run)
        print(json.dumps(run), flush=True)
    (args.out / "compile_window.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0 if all("error" not in r for r in report["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
