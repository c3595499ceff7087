"""The Python a layer's decode step runs besides its launches, on any machine: ``step.decode_step``
at batch 1 over CPU tensors with every kernel launch stubbed out (``launch`` replaced by a call that
only counts), so what is timed is the planning, the lookups, the checks and the argument lists a
step builds on its way to Triton's launcher (issue #24: eager, a step's host time is most of it at
batch 1). No GPU needed; the launcher's own cost is not in it (``probe_host.py`` on the H200).

    $(scripts/vllm-env) gpu/kvarn/probe_step_python.py [--past DIR] [--fused 1|0] [--rounds 7]

``--past DIR``: a past copy of the package's folder (``git archive COMMIT
kvarn/files/vllm/v1/attention/ops/kvarn | tar -x -C build/past``; DIR =
build/past/kvarn/files/vllm/v1/attention/ops/kvarn), timed interleaved with the tree's, rounds
alternating. ``--fused``: the flush and the write in one launch (1, what a few requests take on the
H200) or two (0). Prints µs per step, the median of the rounds, per package.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # the kernels are never run: only their launches

import bench_decode as bd  # also loads kvarn_ops (through _load)
import torch
from conftest import load_package

D, HQ, HKV, CTX, MAX_LEN = 128, 32, 8, 8192, 131072


def stepper(pkg_name: str, fused: bool):
    """A decode step of the package ``pkg_name`` over a batch-1 case, its launches stubbed."""
    step = importlib.import_module(f"{pkg_name}.step")
    config = importlib.import_module(f"{pkg_name}.config")
    decode = importlib.import_module(f"{pkg_name}.triton_decode")
    store = importlib.import_module(f"{pkg_name}.triton_store")
    launches = [0]

    def stub(*args, **kwargs) -> None:
        launches[0] += 1

    decode.launch = store.launch = stub
    step._one_wave = lambda *a: fused
    case = bd.KVarNCase(1, CTX, D, HQ, HKV)
    cfg = config.KVarNConfig()
    g = case.lay.group
    by_slot = torch.full((3 + -(-8192 // g),), -1, dtype=torch.int32)
    w_slots = torch.arange(1, 2, dtype=torch.int64)
    w_rows = torch.full((1,), (CTX - 1) % g, dtype=torch.int64)
    key = torch.randn(1, HKV, D).half()
    value = torch.randn_like(key)
    launch = step.fixed_launch(1, HKV, D, MAX_LEN, g, cfg, case.q.device)
    ws = decode.DecodeWorkspace()
    out = torch.empty_like(case.q)

    def run() -> None:
        step.decode_step(
            case.q, key, value, case.cache, case.pool_k, case.pool_v, case.h16, by_slot, w_slots,
            w_rows, case.slot, case.table, case.seq_lens, case.comp_end, case.lay, cfg, D**-0.5,
            launch, max_model_len=MAX_LEN, workspace=ws, out=out, kernels=True,
        )  # fmt: skip

    return run, launches


def per_step(run, n: int = 20000) -> float:
    start = time.perf_counter()
    for _ in range(n):
        run()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--past", default=None)
    ap.add_argument("--fused", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    bd.DEV = "cpu"
    sides = {"tree": stepper("kvarn_ops", bool(args.fused))}
    if args.past:
        load_package("kvarn_ops_past", Path(args.past).resolve())
        sides["past"] = stepper("kvarn_ops_past", bool(args.fused))
    times: dict[str, list[float]] = {name: [] for name in sides}
    for name, (run, launches) in sides.items():
        for _ in range(200):
            run()
        launches[0] = 0
        run()
        print(f"{name}: {launches[0]} launches a step")
    for r in range(args.rounds):
        for name in sides if r % 2 == 0 else reversed(list(sides)):
            times[name].append(per_step(sides[name][0]))
    for name, got in times.items():
        got.sort()
        print(
            f"{name}: {got[len(got) // 2]:.2f} µs a step of Python (rounds {got[0]:.2f}-{got[-1]:.2f})"
        )


if __name__ == "__main__":
    main()
