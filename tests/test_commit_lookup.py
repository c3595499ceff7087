"""Which manifest SHAs name commits in the fork: one ``git cat-file --batch-check`` for all of them,
the same answers as ``git cat-file -e SHA^{commit}`` one by one (the oracle), for commits, trees,
missing objects and many rows."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hyperqwen_patches import gitrun
from hyperqwen_patches.fork import reading


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_batch_lookup_agrees_with_git_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "fork"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "f").write_text("x\n")
    git(repo, "add", "f")
    git(repo, "commit", "-q", "-m", "one")
    commit = git(repo, "rev-parse", "HEAD")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    missing = [f"{n:040x}" for n in range(1, 2001)]
    asked = [commit, tree, *missing, commit]
    oracle = {
        sha
        for sha in {commit, tree, *missing[:5]}
        if subprocess.run(
            ["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo, capture_output=True
        ).returncode
        == 0
    }
    calls = []
    real = gitrun.run
    monkeypatch.setattr(gitrun, "run", lambda *a, **k: calls.append(a) or real(*a, **k))
    found = reading.commits_existing(repo / ".git", asked)
    assert found == oracle == {commit}
    assert len(calls) == 1  # one process for 2,003 SHAs
    assert reading.commit_exists(repo / ".git", commit)
    assert not reading.commit_exists(repo / ".git", tree)
