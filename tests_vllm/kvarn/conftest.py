"""Load the KVarN package by path as ``kvarn_ops`` (importing it as ``vllm.v1.attention.ops.kvarn``
would clash with the installed, unpatched vLLM), and run Triton in its interpreter when there is no
GPU, so the same kernels are tested on the CPU.

TRITON_INTERPRET must be set before triton is first imported; this conftest runs before any test
module of this directory imports it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

PKG_DIR = Path(__file__).resolve().parents[2] / "kvarn/files/vllm/v1/attention/ops/kvarn"
PKG_NAME = "kvarn_ops"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if not _cuda_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def load_package(name: str = PKG_NAME, where: Path | None = None):
    """The KVarN package as module ``name``, from the tree (or ``where``: a past copy of its folder,
    for a side-by-side benchmark)."""
    if name in sys.modules:
        return sys.modules[name]
    where = PKG_DIR if where is None else where
    spec = importlib.util.spec_from_file_location(
        name, where / "__init__.py", submodule_search_locations=[str(where)]
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


load_package()


def pytest_configure(config) -> None:
    # The interpreter converts 1-element arrays to scalars on every scalar load (NumPy >= 1.25 warns
    # each time); hundreds of identical lines would bury real warnings.
    config.addinivalue_line(
        "filterwarnings", "ignore::DeprecationWarning:triton.runtime.interpreter"
    )
    config.addinivalue_line(
        "filterwarnings",
        "ignore:divide by zero encountered:RuntimeWarning:triton.runtime.interpreter",
    )
