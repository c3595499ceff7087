"""``import``/``port --rebase`` take a cached release's base commit by linking the cache entry's
objects into the fork, not by writing them again; the fork stays whole when the cache is gone."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hyperqwen_patches.sources import basecommit
from hyperqwen_patches.sources.pristine import open_pristine


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def big_release(tmp_path: Path) -> Path:
    """A release directory with enough files for its base commit to be cached."""
    top = tmp_path / "rel"
    for i in range(basecommit.DIR_MIN_FILES + 5):
        path = top / "vllm" / f"d{i % 13}" / f"m{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n" * (1 + i % 7))
    return top


def test_a_cached_base_is_linked_into_the_fork(
    big_release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The files were written an instant ago; a real release was unpacked long before.
    monkeypatch.setattr(basecommit, "RACY_SECONDS", 0.0)
    cache = tmp_path / "cache"
    tree = open_pristine(f"dir:{big_release}", version="0.29.0")
    written = tmp_path / "written"
    git(tmp_path, "init", "-q", "--bare", str(written))
    expected = basecommit.write_base_commit(written, tree, package="vllm", version="0.29.0").commit

    forks = []
    for name in ("fork1", "fork2"):
        fork = tmp_path / name
        git(tmp_path, "init", "-q", "--bare", str(fork))
        got = basecommit.base_commit_in(
            fork, tree, label=tree.label, package="vllm", version="0.29.0", cache_root=cache
        )
        assert got == expected  # the same SHA as written in place
        forks.append(fork)
    entries = list((cache / "base").glob("dir_*.git"))
    assert len(entries) == 1  # built once, linked twice
    packs = list((entries[0] / "objects/pack").glob("*.pack"))
    assert packs and all(p.stat().st_nlink == 3 for p in packs)  # the entry's and two forks' links

    shutil.rmtree(cache)  # pruned: each fork keeps its own link
    for fork in forks:
        git(fork, "fsck", "--full", "--no-dangling", "--connectivity-only")
        assert git(fork, "cat-file", "-t", f"{expected}^{{tree}}") == "tree"
        assert git(fork, "show", f"{expected}:vllm/d0/m0.py") == "value = 0"


def test_without_a_cache_entry_the_base_is_written(tmp_path: Path) -> None:
    top = tmp_path / "small"
    (top / "vllm").mkdir(parents=True)
    (top / "vllm/a.py").write_text("a\n")
    tree = open_pristine(f"dir:{top}", version="0.29.0")
    fork = tmp_path / "fork"
    git(tmp_path, "init", "-q", "--bare", str(fork))
    got = basecommit.base_commit_in(
        fork, tree, label=tree.label, package="vllm", version="0.29.0", cache_root=tmp_path / "c"
    )
    assert git(fork, "show", f"{got}:vllm/a.py") == "a"
    assert not (tmp_path / "c" / "base").exists()  # a small tree is never cached
