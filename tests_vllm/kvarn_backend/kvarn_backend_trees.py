"""Put a patched vLLM 0.29.0 package first on ``sys.path`` for the KVarN backend tests (imported by
this directory's conftest.py; a module of its own name, because ``conftest`` is ambiguous when
pytest collects several test directories in one process).

Where the patched package comes from:

- ``HQP_VLLM_PATCHED`` (set by ``scripts/vllm-tests``): a directory holding the installed ``vllm``
  package with the whole series applied;
- otherwise this file builds one (a developer running ``pytest tests_vllm/kvarn_backend`` with the
  python that ``scripts/vllm-env`` prints): the installed ``vllm`` package is mirrored with hard links
  into a cache directory keyed by the bytes of the series, and the whole series of
  ``patches/manifest.yaml`` (the memory rows, the KVarN module files, the KVarN patches) is applied
  with the tool's ``apply`` (fuzz 0, all or nothing). ``apply`` writes every file through a temporary
  file and a rename, so the installed package's inodes are never written through.

The pristine package (``HQP_VLLM_PRISTINE``, else the installed one) is exposed as ``PRISTINE_VLLM`` for
the tests that compare against it (the knob count). ``VLLM_TARGET_DEVICE=cpu``: no GPU here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERIES_INPUTS = ("patches", "kvarn")

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def _installed_vllm() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "vllm is not installed in this interpreter; run these tests with the python that "
            "scripts/vllm-env prints"
        )
    return Path(spec.origin).parent


def _series_key() -> str:
    h = hashlib.sha256()
    for top in SERIES_INPUTS:
        for p in sorted((REPO / top).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(REPO)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def _build(installed: Path) -> Path:
    cache = Path(
        os.environ.get("HQP_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hyperqwen-patches"
    )
    root = cache / "kvarn-backend-trees" / _series_key()
    if (root / ".complete").exists():
        return root
    tmp = root.with_name(root.name + f".building.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # Hard links: fast and small; `apply` replaces files by rename, never writes through them.
    shutil.copytree(
        installed,
        tmp / "vllm",
        copy_function=os.link,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    res = subprocess.run(
        [str(REPO / "hqp"), "apply", str(tmp)], cwd=REPO, capture_output=True, text=True
    )
    if res.returncode != 0:
        raise RuntimeError(f"the series does not apply onto {installed}:\n{res.stdout}{res.stderr}")
    (tmp / ".complete").touch()
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    # Trees of earlier series revisions: dropped once an hour old (a run still using one is done).
    for old in root.parent.iterdir():
        if old != root and time.time() - old.stat().st_mtime > 3600:
            shutil.rmtree(old, ignore_errors=True)
    return root


INSTALLED_VLLM = _installed_vllm()
PRISTINE_VLLM = Path(os.environ.get("HQP_VLLM_PRISTINE") or INSTALLED_VLLM)
if os.environ.get("HQP_VLLM_PATCHED"):
    PATCHED_ROOT = Path(os.environ["HQP_VLLM_PATCHED"])
else:
    PATCHED_ROOT = _build(INSTALLED_VLLM)
if not (PATCHED_ROOT / "vllm/v1/attention/backends/kvarn_attn.py").is_file():
    raise RuntimeError(f"{PATCHED_ROOT}: no patched vllm with the KVarN rows in it")
if "vllm" in sys.modules:
    imported = Path(sys.modules["vllm"].__file__).resolve()
    if not imported.is_relative_to(PATCHED_ROOT.resolve()):
        raise RuntimeError(
            f"vllm was imported from {imported} before the KVarN tests could put the patched tree "
            f"{PATCHED_ROOT} first; run them in a process of their own"
        )
sys.path.insert(0, str(PATCHED_ROOT))
