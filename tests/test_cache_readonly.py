"""A warm cache the user cannot write (a shared CI cache, a read-only mount): ``check`` runs on it and
writes nothing; a cold one the user cannot write is one line and exit 2.

Root writes through any permission, so the runs here are made as the user ``nobody`` (uid 65534,
through util-linux ``setpriv``), with an interpreter and the tool's sources that user can read. The
test skips, saying why, where that is not possible (not root, no setpriv, no Python 3.11+ that
nobody can run).
"""

from __future__ import annotations

import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REAL_CACHE, REPO_ROOT

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
PIN = "0.29.0"


def _python_for_nobody(env: dict[str, str]) -> str | None:
    for candidate in (
        os.path.realpath(sys.executable),
        "/usr/bin/python3",
        "/usr/local/bin/python3",
    ):
        proc = subprocess.run(
            [
                *NOBODY,
                candidate,
                "-c",
                "import sys, yaml, typer; assert sys.version_info >= (3, 11)",
            ],
            env=env,
            capture_output=True,
            check=False,
        )
        if proc.returncode == 0:
            return candidate
    return None


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in root.rglob("*")
    }


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A world-readable directory (pytest's tmp_path is private to root)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as another user")
    d = Path(tempfile.mkdtemp(prefix="hqp-ro-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _make_readable(root: Path) -> None:
    for p in [root, *root.rglob("*")]:
        if not p.is_symlink():
            mode = p.lstat().st_mode
            p.chmod(stat.S_IMODE(mode) | 0o444 | (0o111 if p.is_dir() else 0))


def test_check_on_a_warm_cache_it_cannot_write(shared: Path) -> None:
    wheel_entry = REAL_CACHE / "pypi" / f"vllm-{PIN}-wheel"
    if not any(wheel_entry.glob("*.whl")):
        pytest.skip(f"no cached vllm {PIN} wheel (the shipped-series tests fetch it)")
    cache, repo = shared / "cache", shared / "repo"
    (cache / "pypi").mkdir(parents=True)
    shutil.copytree(wheel_entry, cache / "pypi" / wheel_entry.name, copy_function=os.link)
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(repo)], check=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": "/nonexistent",
        "HQP_CACHE": str(cache),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), *site.getsitepackages()]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    # Warm it as root, then hand the whole tree to nobody read-only.
    warm = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "check"], cwd=repo, env={**os.environ, **env},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert warm.returncode == 0, warm.stderr[-2000:]
    _make_readable(shared)
    python = _python_for_nobody(env)
    if python is None:
        pytest.skip("no Python 3.11+ with the tool's dependencies that the user nobody can run")
    probe = subprocess.run(
        [*NOBODY, python, "-c", f"open({str(cache / 'probe')!r}, 'w')"], env=env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert probe.returncode != 0 and "Permission denied" in probe.stderr  # the cache is read-only
    before = _snapshot(cache)
    proc = subprocess.run(
        [*NOBODY, python, "-m", "hyperqwen_patches", "check"], cwd=repo, env=env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "all 15 checks hold" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert _snapshot(cache) == before  # nothing written, nothing touched

    # The same user with a cold cache it cannot write: one line, exit 2, naming the cache.
    cold = shared / "cold"
    cold.mkdir()
    cold.chmod(0o755)
    proc = subprocess.run(
        [*NOBODY, python, "-m", "hyperqwen_patches", "check"], cwd=repo,
        env={**env, "HQP_CACHE": str(cold)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: Permission denied") and "HQP_CACHE" in proc.stderr
    assert "Traceback" not in proc.stderr
