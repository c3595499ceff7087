"""The CI workflow's own steps, run here by scripts/workflow-local, fail when patches/fork.bundle is
gone: `check --require-fork` refuses "not verified" fork checks, and the --json report is still
written (the step that keeps it runs `if: always()`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT


def clone_with_the_tools_venv(tmp_path: Path) -> Path:
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
    # ./hqp in the clone runs the tool of this test session (its .venv) instead of making its own:
    # the venv linked in, and pyproject.toml dated before the venv's stamp, so ./hqp does not reinstall.
    venv = Path(sys.executable).parent.parent
    (clone / ".venv").symlink_to(venv)
    stamp = venv / ".hqp-installed"
    if not stamp.exists():
        pytest.skip(f"the tests do not run from a ./hqp-made .venv ({venv})")
    old = stamp.stat().st_mtime - 60
    os.utime(clone / "pyproject.toml", (old, old))
    return clone


@pytest.mark.network
def test_the_workflow_fails_without_the_fork_bundle(tmp_path: Path) -> None:
    clone = clone_with_the_tools_venv(tmp_path)
    (clone / "patches" / "fork.bundle").unlink()
    done = subprocess.run(
        [str(clone / "scripts" / "workflow-local"), "--step", "hyperqwen-patches check"],
        cwd=clone, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "workflow-local: FAILED (exit 1): hyperqwen-patches check" in done.stderr
    assert "not verified" in done.stdout + done.stderr
    report = json.loads((clone / "check-report.json").read_text())
    assert report["ok"] is False and report["exit_code"] == 1
