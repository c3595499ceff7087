"""A warm cache the user cannot write (a shared CI cache, a read-only mount): ``check`` runs on it and
writes nothing; a cold one the user cannot write is one line and exit 2.

Root writes through any permission, so as root the runs are made as the user ``nobody`` (uid 65534,
through util-linux ``setpriv``), with an interpreter and the tool's sources that user can read. Any
other user (a hosted CI runner) runs them as itself, on a tree whose write bits it removed. The
test skips, saying why, where neither is possible (root without setpriv, no Python 3.11+ that
the reader can run).
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
from conftest import REPO_ROOT, TEST_CACHE

from hyperqwen_patches.sources.pristine import open_pristine

AS_ROOT = os.geteuid() == 0
# The command prefix that runs as a user who cannot write the read-only tree.
READER = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if AS_ROOT else []
PIN = "0.29.0"


def _python_for_reader(env: dict[str, str]) -> str | None:
    for candidate in (
        os.path.realpath(sys.executable),
        "/usr/bin/python3",
        "/usr/local/bin/python3",
    ):
        proc = subprocess.run(
            [
                *READER,
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
    """A world-readable directory (pytest's tmp_path is private to its owner)."""
    if AS_ROOT and shutil.which("setpriv") is None:
        pytest.skip("as root the reader is nobody, through setpriv, which is missing")
    d = Path(tempfile.mkdtemp(prefix="hqp-ro-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        for p in [d, *d.rglob("*")]:  # write bits back, so the owner can remove it
            if not p.is_symlink():
                p.chmod(stat.S_IMODE(p.lstat().st_mode) | 0o200)
        shutil.rmtree(d, ignore_errors=True)


def _make_read_only(root: Path) -> None:
    """Readable by all, writable by none but root (which the reader then is not)."""
    for p in [root, *root.rglob("*")]:
        if not p.is_symlink():
            mode = stat.S_IMODE(p.lstat().st_mode) | 0o444 | (0o111 if p.is_dir() else 0)
            p.chmod(mode & ~0o222)


@pytest.mark.network
def test_check_on_a_warm_cache_it_cannot_write(shared: Path) -> None:
    with open_pristine(f"pypi:vllm=={PIN}", version=PIN):
        pass  # the wheel in the session's cache
    wheel_entry = TEST_CACHE / "pypi" / f"vllm-{PIN}-wheel"
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
    # Warm it as the writer, then hand the whole tree to the reader read-only.
    warm = subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", "check"], cwd=repo, env={**os.environ, **env},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert warm.returncode == 0, warm.stderr[-2000:]
    (shared / "cold").mkdir()
    _make_read_only(shared)
    python = _python_for_reader(env)
    if python is None:
        pytest.skip("no Python 3.11+ with the tool's dependencies that the reader can run")
    probe = subprocess.run(
        [*READER, python, "-c", f"open({str(cache / 'probe')!r}, 'w')"], env=env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert probe.returncode != 0 and "Permission denied" in probe.stderr  # the cache is read-only
    before = _snapshot(cache)
    proc = subprocess.run(
        [*READER, python, "-m", "hyperqwen_patches", "check"], cwd=repo, env=env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "all 15 checks hold" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert _snapshot(cache) == before  # nothing written, nothing touched

    # The same user with a cold cache it cannot write: one line, exit 2, naming the cache.
    cold = shared / "cold"  # made read-only with the rest
    proc = subprocess.run(
        [*READER, python, "-m", "hyperqwen_patches", "check"], cwd=repo,
        env={**env, "HQP_CACHE": str(cold)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: Permission denied") and "HQP_CACHE" in proc.stderr
    assert "Traceback" not in proc.stderr
