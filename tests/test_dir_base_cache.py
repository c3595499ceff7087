"""A ``dir:`` source's base commit is cached while its files' stat data is unchanged (performance).

Rebuilding the base commit of a 30,000-file directory at every ``check`` cost seconds and made ``check``
grow with the tree (docs/performance.md). The cache must never give a stale base: any change to a file
(even one that keeps its size), an added or removed file, or a tree that changed a moment ago must lead
to the base that a fresh build gives.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hyperqwen_patches import gitrun
from hyperqwen_patches.sources import basecommit
from hyperqwen_patches.sources.dirtree import DirTree


def make_dir(root: Path, n: int = 30) -> Path:
    for i in range(n):
        path = root / "vllm" / f"pkg{i % 3}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"value = %d\n" % i)
    (root / "vllm" / "__pycache__").mkdir()
    (root / "vllm" / "__pycache__" / "x.pyc").write_bytes(b"\x00pyc")
    return root


def fresh_base(tmp_path: Path, root: Path) -> str:
    """The base commit a build from scratch gives (the oracle)."""
    repo = gitrun.init_bare(tmp_path / f"oracle{time.monotonic_ns()}.git")
    tree = DirTree(root, package="vllm")
    return basecommit.write_base_commit(repo, tree, package="vllm", version="1.0").commit


def cached(cache: Path, root: Path) -> tuple[Path, str] | None:
    tree = DirTree(root, package="vllm")
    return basecommit.cached_base(cache, tree.label, tree, package="vllm", version="1.0")


@pytest.fixture
def small_trees_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(basecommit, "DIR_MIN_FILES", 10)
    monkeypatch.setattr(basecommit, "RACY_SECONDS", 0.0)


@pytest.mark.usefixtures("small_trees_cached")
def test_unchanged_directory_reuses_its_entry(tmp_path: Path) -> None:
    root = make_dir(tmp_path / "src")
    cache = tmp_path / "cache"
    first = cached(cache, root)
    assert first is not None and first[1] == fresh_base(tmp_path, root)
    marker = first[0] / basecommit.BASE_MARKER
    built = marker.stat().st_mtime_ns
    assert cached(cache, root) == first
    assert marker.stat().st_mtime_ns == built  # not rebuilt
    # A .pyc written by an import does not count (the pristine tree leaves __pycache__ out).
    (root / "vllm" / "__pycache__" / "y.pyc").write_bytes(b"\x00")
    assert cached(cache, root) == first


@pytest.mark.usefixtures("small_trees_cached")
@pytest.mark.parametrize("change", ["same-size edit", "add", "remove", "replace"])
def test_any_change_gives_the_fresh_base(tmp_path: Path, change: str) -> None:
    root = make_dir(tmp_path / "src")
    cache = tmp_path / "cache"
    before = cached(cache, root)
    assert before is not None
    target = root / "vllm" / "pkg1" / "mod4.py"
    if change == "same-size edit":
        stat = target.stat()
        target.write_bytes(b"value = 9\n")  # same length as b"value = 4\n"
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old mtime
    elif change == "add":
        (root / "vllm" / "pkg1" / "new.py").write_bytes(b"new = 1\n")
    elif change == "remove":
        target.unlink()
    else:
        replacement = root / "tmp.py"
        replacement.write_bytes(b"value = 4\n")
        os.replace(replacement, target)
    after = cached(cache, root)
    assert after is not None
    assert after[1] == fresh_base(tmp_path, root)
    assert after[1] != before[1] or change == "replace"  # a replace with the same bytes: same base
    assert after[0] != before[0]


def test_a_tree_written_a_moment_ago_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(basecommit, "DIR_MIN_FILES", 10)
    root = make_dir(tmp_path / "src")
    assert cached(tmp_path / "cache", root) is None
    assert not (tmp_path / "cache" / "base").exists()


def test_small_trees_are_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(basecommit, "RACY_SECONDS", 0.0)
    root = make_dir(tmp_path / "src")
    assert basecommit.DIR_MIN_FILES > 30
    assert cached(tmp_path / "cache", root) is None
