"""Load the KVarN package by path as ``kvarn_ops`` (no vLLM on the GPU machine), and put the test
helpers (kvarn_scenario) on the path."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests_vllm/kvarn"))

import conftest  # noqa: E402  (loads the package as kvarn_ops)

kvarn_ops = conftest.load_package()
