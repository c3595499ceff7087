"""Exported files are read by the consumers the design names: GNU patch 2.7.6 (-p1 --fuzz 0) and
``git am``, and both rebuild the fork's tree from the pristine tree, byte for byte and mode for mode."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from conftest import require_gnu_patch
from fixtures_git import BRANCH, PRISTINE, make_fork, sh, write_tree_files

from hyperqwen_patches import gitrun
from hyperqwen_patches.fork import exporting
from hyperqwen_patches.fork import reading as forkgit


def exported(tmp_path: Path) -> tuple[Path, list[str], list[bytes]]:
    fork = tmp_path / "fork"
    base, shas = make_fork(fork)
    git_dir = gitrun.git_dir_of(fork)
    out = exporting.export_commits(git_dir, forkgit.list_commits(git_dir, base, shas[-1]))
    files = [out[s] for s in shas]
    assert all(isinstance(f, bytes) for f in files)
    return fork, shas, files  # type: ignore[return-value]


def tree_files(root: Path) -> dict[str, tuple[bytes, bool]]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and ".git" not in path.parts:
            executable = bool(path.stat().st_mode & stat.S_IXUSR)
            out[path.relative_to(root).as_posix()] = (path.read_bytes(), executable)
    return out


def test_gnu_patch_rebuilds_the_fork_tip(tmp_path: Path) -> None:
    patch = require_gnu_patch()
    fork, _shas, files = exported(tmp_path)
    work = tmp_path / "work"
    write_tree_files(work, PRISTINE)
    for i, data in enumerate(files):
        proc = subprocess.run(
            [patch, "-p1", "--fuzz", "0", "--forward", "--batch"],
            cwd=work,
            input=data,
            capture_output=True,
            check=False,
        )
        assert proc.returncode == 0, (i, proc.stdout, proc.stderr)
        assert b"offset" not in proc.stdout and b"fuzz" not in proc.stdout
    expected = tree_files(fork)
    assert tree_files(work) == expected


def test_git_am_keep_cr_rebuilds_every_commit(tmp_path: Path) -> None:
    fork, shas, files = exported(tmp_path)
    clone = tmp_path / "clone"
    sh(["init", "-q", str(clone)], cwd=tmp_path)
    sh(["fetch", "-q", str(fork), f"{BRANCH}:refs/remotes/fork"], cwd=clone)
    sh(["checkout", "-q", "-b", "base", f"{shas[0]}~1"], cwd=clone)
    for i, data in enumerate(files):
        mbox = tmp_path / f"{i}.patch"
        mbox.write_bytes(data)
        sh(["am", "-q", "--keep-cr", str(mbox)], cwd=clone)
        ours = sh(["rev-parse", "HEAD^{tree}"], cwd=clone)
        theirs = sh(
            ["--git-dir", os.fspath(fork / ".git"), "rev-parse", f"{shas[i]}^{{tree}}"],
            cwd=tmp_path,
        )
        assert ours == theirs, i
        # The commit's message and author survive the trip through the file.
        assert sh(["log", "-1", "--format=%an <%ae> %ad%n%B", "--date=raw"], cwd=clone) == sh(
            [
                "--git-dir",
                os.fspath(fork / ".git"),
                "log",
                "-1",
                "--format=%an <%ae> %ad%n%B",
                "--date=raw",
                shas[i],
            ],
            cwd=tmp_path,
        )
