"""Renames inside one patch as GNU patch 2.7.6 and git apply take them: a chain (a -> b, then b -> c)
is refused by both, so by us; a single rename and a copy beside a rename still apply. Each case is
run through the real GNU patch and git apply, and our result compared with theirs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import require_gnu_patch

from hyperqwen_patches.engine import Policy, apply_series, parse_patch

CHAIN = b"""diff --git a/a b/b
similarity index 100%
rename from a
rename to b
diff --git a/b b/c
similarity index 100%
rename from b
rename to c
"""
SINGLE = b"""diff --git a/a b/b
similarity index 100%
rename from a
rename to b
"""
# A rename, then a section on the old name: the old name is gone (GNU: "can't find file").
RENAME_THEN_OLD = b"""diff --git a/a b/b
similarity index 100%
rename from a
rename to b
diff --git a/a b/a
--- a/a
+++ b/a
@@ -1 +1 @@
-one
+uno
"""
COPY_THEN_RENAME = b"""diff --git a/a b/b
similarity index 100%
copy from a
copy to b
diff --git a/a b/c
similarity index 100%
rename from a
rename to c
"""


def tools_accept(tmp_path: Path, patch: bytes) -> tuple[bool, bool]:
    """(GNU patch applies it, git apply applies it), each on a fresh tree holding ``a``."""
    results = []
    for tool in ("gnu", "git"):
        tree = tmp_path / tool
        tree.mkdir()
        (tree / "a").write_bytes(b"one\n")
        (tmp_path / "p.patch").write_bytes(patch)
        if tool == "gnu":
            argv = [
                require_gnu_patch(),
                "-p1",
                "--fuzz",
                "0",
                "-s",
                "-i",
                str(tmp_path / "p.patch"),
            ]
        else:
            subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
            argv = ["git", "apply", str(tmp_path / "p.patch")]
        done = subprocess.run(argv, cwd=tree, capture_output=True, check=False)
        results.append(done.returncode == 0)
    return results[0], results[1]


@pytest.mark.parametrize(
    ("name", "patch"),
    [
        ("chain", CHAIN),
        ("single", SINGLE),
        ("rename+old name", RENAME_THEN_OLD),
        ("copy+rename", COPY_THEN_RENAME),
    ],
)
def test_renames_in_one_patch_as_gnu_and_git_take_them(
    name: str, patch: bytes, tmp_path: Path
) -> None:
    gnu, git = tools_accept(tmp_path, patch)
    assert gnu == git, name  # the two oracles agree on these cases
    result = apply_series(
        [parse_patch(patch, name=f"{name}.patch")],
        {b"a": b"one\n"}.get,
        Policy(),
    )
    (only,) = result.patches
    assert (only.status == "applied") == gnu, (name, only.status, only.error)
    if name == "chain":
        assert "earlier section of this patch" in str([f.error for f in only.files])
