"""The backend's kernel calls, the ones that run on CUDA, run here on the CPU in Triton's interpreter
through the real backend class, against the backend's own reference paths on the same stream.

On a CPU the backend takes the torch reference (``KVarNAttentionImpl.kernels`` None: kernels on CUDA
only), so the other backend tests never reach the code that calls the Triton kernels: the store and
pool write (``step.flush``/``step.write``), the decode (``_decode``, ``_decode_step``), the multi-token
kernel (``_prefix``: one pass and dense) and the verify step (``_verify_step``). Here the impl is told
to use them (``kernels = True``) and a twin runs the reference; each step's output must agree. With
KVARN_FUSED_DECODE=0 a verify step must take the general path's reference instead of the verify step.

TRITON_INTERPRET must be set before a kernel module is imported, and the other tests of this process
import them without it (the builder imports triton_decode), so the stream runs in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# One stream that reaches every path: first chunks; a continuation chunk of 40 tokens (dense) beside
# one of 3 (one pass); single-token decodes (the step path); speculative verification (every request
# 3 tokens: the verify step); a mixed step (a decode, a 5-token continuation, a new 20-token prompt).
STEPS = [
    {"a": 100, "b": 150},
    {"a": 40, "b": 3},
    {"a": 1, "b": 1},
    {"a": 1, "b": 1},
    {"a": 3, "b": 3},
    {"a": 1, "b": 5, "c": 20},
    {"a": 3, "b": 3, "c": 3},
]

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import kvarn_backend_trees  # noqa: F401  (the patched tree first on sys.path)
import torch
from test_backend_forward import Harness, _cos
from vllm.config import set_current_vllm_config

steps = json.loads(sys.argv[2])


def run(kernels):
    h = Harness()
    h.impl.kernels = kernels
    rows = []
    with set_current_vllm_config(h.cfg):
        for s in steps:
            q, out, sl, md = h.step(dict(s))
            n = max(x.stop for x in sl.values())
            # exact attention over each request's unquantized K/V so far (this step's included)
            exact = {rid: h.dense(rid, q[r]) for rid, r in sl.items()}
            pad = bool((out[n:] == 0).all())
            rows.append((out, sl, md.uniform_decode, md.uniform_verify, pad, exact))
    return rows


kern = run(True)
ref = run(False)
report = []
for i, (a, b) in enumerate(zip(kern, ref, strict=True)):
    out, sl, ud, uv, pad_zero, exact = a
    for rid, rows in sl.items():
        report.append({
            "step": i, "request": rid, "uniform_decode": ud, "uniform_verify": uv,
            "cos_vs_reference_path": _cos(out[rows], b[0][rows]),
            "cos_vs_exact": _cos(out[rows], exact[rid]),
            "finite": bool(torch.isfinite(out[rows].float()).all()),
            "padding_zero": pad_zero,
        })

# KVARN_FUSED_DECODE=0: verification goes to the general path's reference, never the verify step
import dataclasses

h = Harness()
h.impl.kernels = True
h.impl.config = dataclasses.replace(h.impl.config, fused_decode=False)


def refuse(*args, **kwargs):
    raise AssertionError("KVARN_FUSED_DECODE=0 took the verify step")


h.impl._verify_step = refuse
verified = []
with set_current_vllm_config(h.cfg):
    for s in ({"a": 100, "b": 150}, {"a": 3, "b": 3}):
        q, out, sl, md = h.step(dict(s))
        verified += [(md.uniform_verify, _cos(out[r], h.dense(rid, q[r]))) for rid, r in sl.items()]
print("RESULT " + json.dumps(report))
print("UNFUSED " + json.dumps(verified))
"""


def test_the_backend_kernel_paths_agree_with_its_reference_paths() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(HERE), json.dumps(STEPS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    unfused = [x for x in proc.stdout.splitlines() if x.startswith("UNFUSED ")]
    assert proc.returncode == 0 and lines and unfused, proc.stderr[-4000:]
    report = json.loads(lines[-1][len("RESULT ") :])
    # with KVARN_FUSED_DECODE=0 a uniform verify step ran (through the general path) and is right
    verified = json.loads(unfused[-1][len("UNFUSED ") :])
    assert [uv for uv, _c in verified] == [0, 0, 3, 3]
    assert all(c >= 0.99 for _uv, c in verified), verified
    assert len(report) == sum(len(s) for s in STEPS)
    # every path was taken: the step path, the verify step and the general path
    assert {r["step"] for r in report if r["uniform_decode"]} == {2, 3}
    assert {r["step"] for r in report if r["uniform_verify"]} == {4, 6}
    for r in report:
        assert r["finite"] and r["padding_zero"], r
        assert r["cos_vs_reference_path"] >= 0.999, r
        assert r["cos_vs_exact"] >= 0.99, r
