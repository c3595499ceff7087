"""The README's exit codes, command by command: 2 for a usage problem (an unknown option, a --repo
that is not a repository), 0 for a run that holds, 1 for a finding where the command has findings.

Exit 3 (git failed), 130 (interrupted) and 143 (terminated) have their own tests:
tests/test_gitrun.py, tests/test_export_cli.py, tests/test_apply_kill.py, tests/test_json_schemas.py.
Every command's --help states every code (tests/test_cli_habits.py).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.commands.argtable import TABLE

REPO = Path(__file__).resolve().parents[1]

# A positional argument for the commands that need one before an option error can be reached.
POSITIONAL = {"apply": ["DIR"], "status": ["DIR"], "unapply": ["DIR"], "edit": ["ROW"],
              "new": ["NAME"], "adopt": ["SERIES"], "diff": ["A", "B"], "drop": ["ROW"],
              "move": ["ROW"], "rename": ["OLD", "NEW"]}  # fmt: skip


def hqp(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def test_the_readme_lists_the_codes() -> None:
    readme = (REPO / "README.md").read_text()
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 130 |", "| 143 |"):
        assert code in readme


@pytest.mark.parametrize("command", sorted(TABLE))
def test_an_unknown_option_is_exit_2(command: str) -> None:
    proc = hqp(command, *POSITIONAL.get(command, []), "--no-such-option")
    assert proc.returncode == 2, (command, proc.stderr)
    assert "--no-such-option" in proc.stderr


@pytest.mark.parametrize("command", sorted(c for c in TABLE if "--repo" in str(TABLE[c])))
def test_a_repo_that_is_not_one_is_exit_2_with_one_line(command: str, tmp_path: Path) -> None:
    extra = {"apply": [tmp_path], "status": [tmp_path], "unapply": [tmp_path], "edit": ["x"],
             "new": ["x", "--after", "y"], "import": ["--into", tmp_path / "f"],
             "port": ["--to", "9.9.9"], "diff": ["HEAD", "HEAD"],
             "export": ["--fork", tmp_path], "drop": ["x"], "move": ["x", "--after", "y"],
             "rename": ["x", "y"]}  # fmt: skip
    proc = hqp(command, *extra.get(command, []), "--repo", tmp_path)
    assert proc.returncode == 2, (command, proc.returncode, proc.stderr)
    assert proc.stderr.startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "argv",
    [["check"], ["list"], ["render", "--check"], ["statics"], ["cache"], ["diff", "HEAD", "HEAD"]],
    ids=lambda a: " ".join(a),
)
def test_a_run_that_holds_is_exit_0(argv: list[str]) -> None:
    proc = hqp(*argv, cwd=REPO)
    assert proc.returncode == 0, (argv, proc.stderr[-2000:])


def test_findings_are_exit_1(tmp_path: Path) -> None:
    """check, render --check and apply on a copy of the shipped repository with one row broken;
    status on a tree in a state no run leaves."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "patches", repo / "patches")
    shutil.copytree(REPO / "kvarn", repo / "kvarn")
    shutil.copytree(REPO / "docker", repo / "docker")
    shutil.copy(REPO / "PATCHES.md", repo / "PATCHES.md")
    assert hqp("render", "--check", "--repo", repo).returncode == 0
    (repo / "PATCHES.md").write_text((repo / "PATCHES.md").read_text() + "\nhand edit\n")
    proc = hqp("render", "--check", "--repo", repo)
    assert proc.returncode == 1 and "PATCHES.md" in proc.stderr, proc.stderr
    proc = hqp("check", "--repo", repo)
    assert proc.returncode == 1, proc.stderr[-2000:]

    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "f.py").write_text("a\n")
    patch = tmp_path / "p.patch"
    patch.write_text("--- a/vllm/f.py\n+++ b/vllm/f.py\n@@ -1 +1 @@\n-x\n+y\n")
    assert hqp("apply", site, "--patch", patch).returncode == 1
