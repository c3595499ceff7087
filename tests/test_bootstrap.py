"""``./hqp`` (the quick start's first command) refuses an interpreter it cannot install for, at once,
naming it and how to pick another, and leaves no half-made ``.venv`` behind."""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def old_pythons() -> list[str]:
    """Real interpreters older than 3.11 that run in a bare environment (not pyenv's shims)."""
    found = sorted(glob.glob("/root/.pyenv/versions/3.[6-9]*/bin/python3"))
    found += sorted(glob.glob("/root/.pyenv/versions/3.10*/bin/python3"))
    found += [shutil.which(f"python3.{minor}") or "" for minor in range(6, 11)]
    env = {"PATH": "/usr/bin:/bin"}
    return [
        p
        for p in found
        if p and subprocess.run([p, "-c", "pass"], env=env, capture_output=True).returncode == 0
    ]


def run_hqp(tmp_path: Path, python: str) -> subprocess.CompletedProcess[str]:
    shutil.copy2(ROOT / "hqp", tmp_path / "hqp")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return subprocess.run(
        ["./hqp", "check"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHON": python},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_an_old_python_is_refused_at_once(tmp_path: Path) -> None:
    olds = old_pythons()
    if not olds:
        pytest.skip("no Python older than 3.11 on this machine")
    proc = run_hqp(tmp_path, olds[0])
    assert proc.returncode == 2
    assert "needs Python 3.11 or later" in proc.stderr and olds[0] in proc.stderr
    assert "PYTHON=" in proc.stderr
    assert not (tmp_path / ".venv").exists()


def test_a_missing_python_is_refused(tmp_path: Path) -> None:
    proc = run_hqp(tmp_path, str(tmp_path / "no-such-python"))
    assert proc.returncode == 2 and "is not found" in proc.stderr
    assert not (tmp_path / ".venv").exists()
