"""What ``status``, ``apply --check-applied``, ``apply --upto`` and ``unapply`` say of a tree, checked
against the tree itself: real directories, real git repositories, GNU patch 2.7.6 as the oracle.

Issue #39: a tree carrying an earlier revision of the series (a dropped row, a replaced row, a foreign
edit) was called "complete" or "pristine"; ``--upto`` could not take later rows out; a deletion of a
file with other content was "already applied" where GNU patch exits 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_gnu_patch


def hqp(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        env={**os.environ, "COLUMNS": "400"},
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def gnu(patch_file: Path, directory: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            require_gnu_patch(),
            "-p1",
            "--fuzz",
            "0",
            "--forward",
            "--no-backup-if-mismatch",
            "-r",
            "-",
            "-i",
            str(patch_file),
            *extra,
        ],
        cwd=directory,
        capture_output=True,
        check=False,
    )


# --- a deletion of a file that holds other content ------------------------------------------------

DELETE = (
    b"diff --git a/vllm/old.py b/vllm/old.py\ndeleted file mode 100644\n"
    b"--- a/vllm/old.py\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-one\n-two\n-three\n"
)


@pytest.mark.parametrize(
    "content", [b"other\ncontent\n", b"one\ntwo\n", b"one\ntwo\nthree\nfour\n"]
)
def test_deleting_a_file_with_other_content_fails_as_gnu_patch_does(
    tmp_path: Path, content: bytes
) -> None:
    patch_file = tmp_path / "d.patch"
    patch_file.write_bytes(DELETE)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for root in (ours, theirs):
        (root / "vllm").mkdir(parents=True)
        (root / "vllm/old.py").write_bytes(content)
    before = snapshot(ours)
    proc = hqp("apply", ours, "--patch", patch_file)
    oracle = gnu(patch_file, theirs)
    assert (proc.returncode, oracle.returncode) == (1, 1), proc.stdout + proc.stderr
    assert "not deleting vllm/old.py" in proc.stdout
    # All or nothing: the file is kept as it was (GNU patch may leave the lines it could not delete).
    assert snapshot(ours) == before
    # --check-applied agrees with apply: the deletion is not there.
    checked = hqp("apply", ours, "--patch", patch_file, "--check-applied")
    assert checked.returncode == 1 and "does not carry 1 of 1" in checked.stderr


def test_a_deletion_applies_and_re_applies(tmp_path: Path) -> None:
    patch_file = tmp_path / "d.patch"
    patch_file.write_bytes(DELETE)
    (tmp_path / "t/vllm").mkdir(parents=True)
    (tmp_path / "t/vllm/old.py").write_bytes(b"one\ntwo\nthree\n")
    (tmp_path / "t/vllm/keep.py").write_bytes(b"x\n")
    assert hqp("apply", tmp_path / "t", "--patch", patch_file).returncode == 0
    assert not (tmp_path / "t/vllm/old.py").exists()
    again = hqp("apply", tmp_path / "t", "--patch", patch_file)
    assert again.returncode == 0 and "already carries all 1" in again.stdout
