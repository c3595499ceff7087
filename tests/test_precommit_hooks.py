"""The shipped pre-commit hooks: well formed, and each hook's command passes on this repository."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_hooks_are_well_formed_and_pass_here() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert {h["id"] for h in hooks} == {"hyperqwen-patches-render", "hyperqwen-patches-check"}
    for hook in hooks:
        assert hook["language"] == "python" and hook["pass_filenames"] is False
        re.compile(hook["files"])
        argv = shlex.split(hook["entry"])
        assert argv[0] == "hyperqwen-patches"  # the console script the package installs
        proc = subprocess.run(
            [sys.executable, "-m", "hyperqwen_patches", *argv[1:]],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (hook["id"], proc.stdout[-2000:], proc.stderr[-2000:])
    files = re.compile(next(h for h in hooks if h["id"] == "hyperqwen-patches-check")["files"])
    assert files.search("patches/0001-memory-profile-after-warmup.patch")
    assert files.search("PATCHES.md") and not files.search("src/hyperqwen_patches/cli.py")
