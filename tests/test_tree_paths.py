"""``Tree``'s path resolution against ``os.path.realpath``, the oracle it replaced.

A directory's real path is built from its parent's (one ``lstat`` per directory, cached), where
``realpath`` walks every component from ``/``; both must give the same path for every shape a patch
can name: plain directories, links to siblings, chains of links, relative links climbing with
``..`` and staying inside, a link to a directory not created yet, and ``./`` or ``//`` on the way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hyperqwen_patches.sources.tree import Tree


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "pkg/sub/deep").mkdir(parents=True)
    (root / "other/inner").mkdir(parents=True)
    (root / "pkg/to_other").symlink_to("../other")  # relative, climbs and stays inside
    (root / "chain1").symlink_to("chain2")
    (root / "chain2").symlink_to("pkg/sub")  # a chain of two links
    (root / "abs").symlink_to(root / "other/inner")  # absolute, inside
    (root / "later").symlink_to("not/yet/made")  # a directory a write would create
    (root / "pkg/sub/deep/f.py").write_text("x\n")
    return root


PATHS = [
    b"top.py",
    b"pkg/sub/deep/f.py",
    b"pkg/to_other/inner/g.py",
    b"chain1/deep/h.py",
    b"abs/i.py",
    b"later/j.py",
    b"new/dir/k.py",
    b"pkg/./sub//deep/f.py",
    b"./pkg/sub/l.py",
]


@pytest.mark.parametrize("path", PATHS, ids=[p.decode() for p in PATHS])
def test_a_directory_resolves_as_realpath_resolves_it(linked: Path, path: bytes) -> None:
    tree = Tree(linked)
    real_root = os.path.realpath(os.fsencode(linked))
    parent, _, name = path.rpartition(b"/")
    want = os.path.join(os.path.realpath(os.path.join(real_root, parent)), name)
    assert tree._unresolved(path) == want
    # the same again from the cache, and after its parent was resolved on its own first
    assert tree._unresolved(path) == want
    fresh = Tree(linked)
    fresh._real_dir(parent.rpartition(b"/")[0])
    assert fresh._unresolved(path) == want
