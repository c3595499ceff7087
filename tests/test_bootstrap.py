"""``./hqp`` (the quick start's first command) refuses an interpreter it cannot install for, at once,
naming it and how to pick another, and leaves no half-made ``.venv`` behind."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def old_pythons() -> list[str]:
    """Real interpreters older than 3.11 on PATH that run in a bare environment."""
    found = [shutil.which(f"python3.{minor}") or "" for minor in range(6, 11)]
    env = {"PATH": "/usr/bin:/bin"}
    return [
        p
        for p in found
        if p and subprocess.run([p, "-c", "pass"], env=env, capture_output=True).returncode == 0
    ]


def fake_old_python(tmp_path: Path) -> str:
    """An interpreter that answers as Python 3.10 does to the two questions ./hqp asks it (the
    version test and ``-V``): the refusal is tested on every machine, with or without an old Python."""
    path = tmp_path / "bin" / "python3.10"
    path.parent.mkdir()
    path.write_text(
        '#!/bin/sh\nif [ "$1" = -V ]; then echo "Python 3.10.14"; exit 0; fi\n'
        'touch "$0.ran"\nexit 1\n'
    )
    path.chmod(0o755)
    return str(path)


def run_hqp(tmp_path: Path, python: str) -> subprocess.CompletedProcess[str]:
    shutil.copy2(ROOT / "hqp", tmp_path / "hqp")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return subprocess.run(
        ["./hqp", "check"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHON": python},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_an_old_python_is_refused_at_once(tmp_path: Path) -> None:
    old = fake_old_python(tmp_path)
    proc = run_hqp(tmp_path, old)
    assert Path(old + ".ran").exists()  # asked, not guessed from the name
    assert proc.returncode == 2
    assert "needs Python 3.11 or later" in proc.stderr and old in proc.stderr
    assert "Python 3.10.14" in proc.stderr and "PYTHON=" in proc.stderr
    assert not (tmp_path / ".venv").exists()


def test_a_real_old_python_is_refused_at_once(tmp_path: Path) -> None:
    olds = old_pythons()
    if not olds:
        pytest.skip("no Python older than 3.11 on PATH (the fake above covers the refusal)")
    proc = run_hqp(tmp_path, olds[0])
    assert proc.returncode == 2
    assert "needs Python 3.11 or later" in proc.stderr and olds[0] in proc.stderr
    assert "PYTHON=" in proc.stderr
    assert not (tmp_path / ".venv").exists()


def test_a_missing_python_is_refused(tmp_path: Path) -> None:
    proc = run_hqp(tmp_path, str(tmp_path / "no-such-python"))
    assert proc.returncode == 2 and "is not found" in proc.stderr
    assert not (tmp_path / ".venv").exists()
