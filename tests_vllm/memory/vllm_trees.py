"""Run a scenario script against the pristine or the patched vLLM tree, in a subprocess.

``scripts/vllm-tests`` mirrors the environment's site-packages/vllm twice and exports them:
``HQP_VLLM_PATCHED`` is the directory holding the patched ``vllm/`` (the series applied) and
``HQP_VLLM_PRISTINE`` the pristine ``vllm`` package itself (its parent holds it). One process imports
one vllm, so a test that compares the two runs the same scenario twice, each time with ``PYTHONPATH``
naming one tree's root. A scenario prints one line ``HQP-RESULT <json>``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MARK = "HQP-RESULT "
TREES = {"pristine": "HQP_VLLM_PRISTINE", "patched": "HQP_VLLM_PATCHED"}


def tree_root(kind: str) -> Path:
    var = TREES[kind]
    value = os.environ.get(var)
    if not value:
        # A failure, not a skip: these tests are the proof that the rows change vLLM.
        raise RuntimeError(
            f"{var} is not set: run these tests through scripts/vllm-tests, which builds the "
            "pristine and patched trees (HQP_VLLM_PYTHON=$(scripts/vllm-env) scripts/vllm-tests)"
        )
    root = Path(value)
    if kind == "pristine":
        root = root.parent  # the package itself: see the module docstring
    if not (root / "vllm" / "__init__.py").is_file():
        raise RuntimeError(f"{var}={root}: no vllm package in it")
    return root


def run_scenario(kind: str, script: str, params: dict[str, Any]) -> dict[str, Any]:
    root = tree_root(kind)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    env["VLLM_TARGET_DEVICE"] = "cpu"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for knob in ("VLLM_ENABLE_STARTUP_PLAN", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"):
        env.pop(knob, None)  # the scenarios assume vLLM's defaults
    proc = subprocess.run(
        [sys.executable, str(HERE / script), json.dumps(params)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or len(lines) != 1:
        raise AssertionError(
            f"{script} on the {kind} tree ({root}) exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-8000:]}"
        )
    result = json.loads(lines[0][len(MARK) :])
    # The scenario reports which vllm it imported: the tree asked for, never site-packages.
    assert Path(result["vllm_file"]).resolve().is_relative_to(root.resolve()), result["vllm_file"]
    return result


def emit(result: dict[str, Any]) -> None:
    """Called by a scenario: print its result where run_scenario finds it."""
    import vllm

    print(MARK + json.dumps({"vllm_file": vllm.__file__, **result}), flush=True)
