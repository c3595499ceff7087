"""Manifest rows → engine patches: patch rows parsed, module rows as creations, both path conventions."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from hyperqwen_patches.commands.apply import default_series as apply_default_series
from hyperqwen_patches.engine.applying import apply_series
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.series.rows import RowError, default_series, load_series

OLD = b"A = 1\nB = 2\nC = 3\n"
NEW = b"A = 1\nB = 20\nC = 3\n"


def unified(path: str, old: bytes, new: bytes) -> bytes:
    body = difflib.diff_bytes(
        difflib.unified_diff,
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}".encode(),
        tofile=f"b/{path}".encode(),
    )
    return b"Subject: [PATCH] change B\n\n---\n" + b"".join(body)


def make_repo(root: Path, *, paths: str = "root", rows: str | None = None) -> Path:
    (root / "patches").mkdir(parents=True)
    prefix = "vllm/" if paths == "root" else ""
    (root / "patches/0001-b.patch").write_bytes(unified(f"{prefix}envs.py", OLD, NEW))
    mod = root / "kvarn/files" / prefix / "v1"
    mod.mkdir(parents=True)
    (mod / "kvarn.py").write_bytes(b"X = 1\n")
    (mod / "__pycache__").mkdir()
    (mod / "__pycache__/kvarn.cpython-311.pyc").write_bytes(b"\x00junk")
    rows = rows or (
        "  - {name: b, patch: patches/0001-b.patch, kind: fix, what: B, cut_against: '0.29.0', retires_when: never}\n"
        "  - {name: kvarn, files: kvarn/files, kind: own, what: K, cut_against: '0.29.0', retires_when: never}\n"
        "  - {name: old, patch: patches/0009-gone.patch, kind: fix, what: O, cut_against: '0.28.0', retires_when: x, skip: retired}\n"
    )
    (root / "patches/manifest.yaml").write_text(
        f"format: 1\npin: '0.29.0'\npackage: vllm\npaths: {paths}\nrows:\n{rows}"
    )
    return root


def test_rows_become_patches_in_order(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    patches = default_series(root)
    assert [p.name for p in patches] == ["b", "kvarn"]  # the skipped row is left out
    b, kvarn = patches
    assert [f.path for f in b.files] == [b"vllm/envs.py"]
    assert kvarn.module_files and [f.path for f in kvarn.files] == [b"vllm/v1/kvarn.py"]
    assert kvarn.files[0].content == b"X = 1\n"  # __pycache__ debris is not part of the row
    pristine = {b"vllm/envs.py": OLD}
    result = apply_series(patches, pristine.get)
    assert result.ok
    assert result.changes == {b"vllm/envs.py": NEW, b"vllm/v1/kvarn.py": b"X = 1\n"}


def test_package_convention_is_prefixed(tmp_path: Path) -> None:
    root = make_repo(tmp_path, paths="package")
    b, kvarn = default_series(root)
    assert [f.path for f in b.files] == [b"vllm/envs.py"]
    assert [f.path for f in kvarn.files] == [b"vllm/v1/kvarn.py"]
    assert apply_series([b, kvarn], {b"vllm/envs.py": OLD}.get).ok


def test_bad_rows_are_collected_not_raised(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    (root / "patches/0001-b.patch").write_bytes(b"@@ -1,3 +1,3 @@\n garbage\n")
    (root / "kvarn/files/stray.py").write_bytes(b"x\n")
    rows = load_series(load_manifest(root), include_skipped=True)
    assert [(r.row.name, r.patch is None) for r in rows] == [
        ("b", True),
        ("kvarn", True),
        ("old", True),
    ]
    assert rows[1].error == (
        "row kvarn (kvarn/files): stray.py is not under vllm/: a module directory mirrors the tree "
        "(e.g. kvarn/files/vllm/...)"
    )
    assert (
        rows[2].error
        == "row old (patches/0009-gone.patch): the patch file patches/0009-gone.patch does not exist"
    )
    assert rows[0].error == (
        "row b (patches/0001-b.patch): no file headers found: this is not a unified diff"
    )
    with pytest.raises(UsageError) as info:
        default_series(root)
    assert info.value.message.splitlines()[0].startswith(
        "2 row(s) of "
    )  # both applied rows, at once


def test_module_directory_must_exist_and_hold_files(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    man = load_manifest(root)
    for child in sorted((root / "kvarn/files").rglob("*"), reverse=True):
        child.unlink() if child.is_file() else child.rmdir()
    rows = load_series(man)
    assert (
        rows[1].error == "row kvarn (kvarn/files): the module directory kvarn/files holds no files"
    )
    (root / "kvarn/files").rmdir()
    assert (
        load_series(man)[1].error
        == "row kvarn (kvarn/files): the module directory kvarn/files does not exist"
    )
    assert isinstance(RowError(man.rows[1], "x"), UsageError)


def test_apply_command_uses_the_manifest_series(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    (root / "deep/er").mkdir(parents=True)
    assert [p.name for p in apply_default_series(root / "deep/er")] == ["b", "kvarn"]
    with pytest.raises(UsageError, match="no manifest found"):
        apply_default_series(tmp_path.parent / "nowhere")


def test_rows_reaching_outside_the_repository_through_links_are_refused(tmp_path: Path) -> None:
    """A linked ``kvarn/files``, a linked directory inside it, a linked patch file: each would make a
    check read (and print) files the repository does not hold."""
    outside = tmp_path / "elsewhere"
    (outside / "vllm/v1").mkdir(parents=True)
    (outside / "vllm/v1/secret.py").write_bytes(b"TOKEN = 'x'\n")
    (outside / "0001-b.patch").write_bytes(unified("vllm/envs.py", OLD, NEW))

    root = make_repo(tmp_path / "a")
    shutil.rmtree(root / "kvarn/files")
    (root / "kvarn/files").symlink_to(outside)
    error = load_series(load_manifest(root))[1].error
    assert error is not None and "outside the repository" in error and "kvarn/files" in error

    root = make_repo(tmp_path / "b")
    (root / "kvarn/files/vllm/linked").symlink_to(outside / "vllm/v1")
    error = load_series(load_manifest(root))[1].error
    assert error == (
        "row kvarn (kvarn/files): vllm/linked is a symbolic link; module directories must be "
        "plain directories"
    )

    root = make_repo(tmp_path / "c")
    (root / "patches/0001-b.patch").unlink()
    (root / "patches/0001-b.patch").symlink_to(outside / "0001-b.patch")
    error = load_series(load_manifest(root))[0].error
    assert error is not None and "outside the repository" in error

    root = make_repo(tmp_path / "d")  # a link inside the repository is the repository's own
    (root / "patches/real.patch").write_bytes((root / "patches/0001-b.patch").read_bytes())
    (root / "patches/0001-b.patch").unlink()
    (root / "patches/0001-b.patch").symlink_to("real.patch")
    assert load_series(load_manifest(root))[0].error is None
