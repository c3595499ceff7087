"""Put a patched vLLM 0.29.0 package first on ``sys.path`` for the KVarN backend tests.

Where the patched package comes from:

- ``HQP_VLLM_PATCHED`` (set by ``scripts/vllm-tests``): a directory holding the installed ``vllm``
  package with the whole series applied (module-file rows copied, patches at fuzz 0);
- otherwise this file builds one (for a developer running ``pytest tests_vllm/kvarn_backend`` with the
  vLLM environment's python): the installed ``vllm`` package is mirrored with hard links into a cache
  directory keyed by the bytes of the series, then the module files are copied and the two KVarN
  patches applied with GNU ``patch -p1 --fuzz 0 --forward``, every file a patch touches being
  unlinked first so the installed package is never written through a shared inode.

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
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "kvarn/files"
PATCHES = (REPO / "kvarn/kvarn-0.29.0.patch", REPO / "kvarn/kvarn-v2-runner-0.29.0.patch")

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def _installed_vllm() -> Path:
    if "vllm" in sys.modules:
        raise RuntimeError(
            "vllm was imported before the KVarN conftest could put the patched copy first"
        )
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "vllm is not installed in this interpreter; run these tests with the python that "
            "scripts/vllm-env prints"
        )
    return Path(spec.origin).parent


def _series_key() -> str:
    h = hashlib.sha256()
    for p in sorted(FILES.rglob("*.py")):
        h.update(str(p.relative_to(FILES)).encode() + b"\0" + p.read_bytes())
    for p in PATCHES:
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _touched(patch: Path) -> list[str]:
    out = []
    for line in patch.read_bytes().splitlines():
        if line.startswith(b"+++ b/"):
            out.append(line[6:].decode())
    return out


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
    # Hard links: fast and small; every file we change is unlinked first (below).
    shutil.copytree(
        installed,
        tmp / "vllm",
        copy_function=os.link,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for src in FILES.rglob("*"):
        if src.is_file() and src.suffix == ".py":
            dst = tmp / src.relative_to(FILES)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.exists():
                dst.unlink()
            shutil.copyfile(src, dst)
    for patch in PATCHES:
        for rel in _touched(patch):
            target = tmp / rel
            if target.exists():
                data = target.read_bytes()
                target.unlink()
                target.write_bytes(data)
        res = subprocess.run(
            ["patch", "-p1", "--fuzz", "0", "--forward", "--batch", "-i", str(patch)],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise RuntimeError(f"{patch.name} does not apply at fuzz 0:\n{res.stdout}{res.stderr}")
    (tmp / ".complete").touch()
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


INSTALLED_VLLM = _installed_vllm()
PRISTINE_VLLM = Path(os.environ.get("HQP_VLLM_PRISTINE") or INSTALLED_VLLM)
if os.environ.get("HQP_VLLM_PATCHED"):
    PATCHED_ROOT = Path(os.environ["HQP_VLLM_PATCHED"])
else:
    PATCHED_ROOT = _build(INSTALLED_VLLM)
if not (PATCHED_ROOT / "vllm/v1/attention/backends/kvarn_attn.py").is_file():
    raise RuntimeError(f"{PATCHED_ROOT}: no patched vllm with the KVarN rows in it")
sys.path.insert(0, str(PATCHED_ROOT))
