"""Round trips on real repositories: import(export(fork)) reproduces every tree, and
export(import(series)) reproduces every file byte for byte."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from fixtures_git import BRANCH, PRISTINE, DictTree, make_fork, sh

from hyperqwen_patches.errors import GitError
from hyperqwen_patches.fork import exporting, exportplan, importing
from hyperqwen_patches.series.manifest import load_manifest

MANIFEST = """\
# A test series. Comments and formatting survive export's edits.
format: 1
pin: "0.29.0"
package: vllm
source: pypi:vllm==0.29.0
paths: root
export_points:
  - name: qwen38
    branch: {branch}
rows: []
retirements: []
"""


def new_series(root: Path, branch: str = BRANCH) -> Path:
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "manifest.yaml").write_text(MANIFEST.format(branch=branch))
    return root


def export(root: Path, fork: Path) -> exportplan.ExportPlan:
    plan = exporting.plan_export(load_manifest(root), fork)
    exporting.write_export(plan)
    return plan


def tree_of(repo: Path, rev: str) -> str:
    return sh(["rev-parse", f"{rev}^{{tree}}"], cwd=repo).decode().strip()


def patch_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted((root / "patches").glob("*.patch"))
    }


def exported_series(tmp_path: Path) -> tuple[Path, Path]:
    """A fork with the four rows, and a series repository exported from it."""
    fork = tmp_path / "fork"
    make_fork(fork)
    series = new_series(tmp_path / "series")
    export(series, fork)
    return series, fork


def test_export_then_import_then_export(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    base, shas = make_fork(fork)
    series = new_series(tmp_path / "series")

    plan = export(series, fork)
    assert plan.added_rows == ["envs-knob", "crlf-latin1", "mode-rename", "new-module"]
    manifest = load_manifest(series)
    assert [r.commit for r in manifest.rows] == shas
    assert manifest.export_points[0].commit == shas[-1]
    assert manifest.export_points[0].base == base
    text = (series / "patches" / "manifest.yaml").read_text()
    assert text.startswith("# A test series. Comments and formatting survive export's edits.\n")
    assert (series / "PATCHES.md").exists()
    entries = [
        line
        for line in (series / "patches" / "series").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert entries == [f"{n}.patch" for n in plan.added_rows]
    first = patch_files(series)
    assert len(first) == 4

    # A second export of the same fork changes nothing.
    again = exporting.plan_export(load_manifest(series), fork)
    assert again.up_to_date, again.to_json()

    # import(export(fork)) reproduces every tree.
    rebuilt = tmp_path / "rebuilt"
    results = importing.import_series(
        load_manifest(series), rebuilt, tree=DictTree(PRISTINE), create=True
    )
    assert [r.branch for r in results] == [BRANCH]
    assert results[0].base == base
    imported = [r.commit for r in results[0].rows]
    assert [tree_of(rebuilt, c) for c in imported] == [tree_of(fork, c) for c in shas]
    # Messages survive the trip through the files (the long non-ASCII subject is unfolded, decoded).
    assert [sh(["log", "-1", "--format=%an%n%ad%n%B", c], cwd=rebuilt) for c in imported] == [
        sh(["log", "-1", "--format=%an%n%ad%n%B", c], cwd=fork) for c in shas
    ]
    # Author, date and message come from the patch files; the committer is pinned.
    raw = sh(["cat-file", "commit", imported[0]], cwd=rebuilt).decode()
    assert "author Fork Author <fork@example.invalid> 1700000000 +0100" in raw
    assert (
        "committer hyperqwen-patches <pristine@hyperqwen-patches.invalid> 1700000000 +0100" in raw
    )
    assert raw.endswith(
        "envs: register VLLM_HQP_KNOB\n\nThe knob joins the compile cache key.\n\nHqp-Row: envs-knob\n"
    )

    # export(import(series)) reproduces every file byte for byte.
    second = tmp_path / "series2"
    shutil.copytree(series, second)
    plan2 = export(second, rebuilt)
    assert patch_files(second) == first
    assert not plan2.semantic and not plan2.added_rows
    assert set(plan2.commit_updates) == {"envs-knob", "crlf-latin1", "mode-rename", "new-module"}


def test_import_is_deterministic_and_leaves_the_repository_alone(tmp_path: Path) -> None:
    series, _fork = exported_series(tmp_path)
    manifest = load_manifest(series)

    a = importing.import_series(manifest, tmp_path / "a", tree=DictTree(PRISTINE), create=True)
    # Into an existing repository with a work tree, a dirty index and a checked-out branch.
    b_repo = tmp_path / "b"
    sh(["init", "-q", "-b", "main", str(b_repo)], cwd=tmp_path)
    (b_repo / "f").write_text("x\n")
    sh(["add", "f"], cwd=b_repo)
    sh(["commit", "-q", "-m", "user"], cwd=b_repo)
    (b_repo / "f").write_text("dirty\n")
    sh(["config", "commit.gpgSign", "true"], cwd=b_repo)  # would break commit-tree if honoured
    git_dir = b_repo / ".git"
    before = (
        (git_dir / "index").read_bytes(),
        (git_dir / "HEAD").read_bytes(),
        (git_dir / "config").read_bytes(),
        (b_repo / "f").read_bytes(),
    )
    b = importing.import_series(manifest, b_repo, tree=DictTree(PRISTINE))
    after = (
        (git_dir / "index").read_bytes(),
        (git_dir / "HEAD").read_bytes(),
        (git_dir / "config").read_bytes(),
        (b_repo / "f").read_bytes(),
    )
    assert before == after
    assert [r.commit for r in a[0].rows] == [r.commit for r in b[0].rows]
    assert a[0].tip == b[0].tip

    # Importing again is a no-op; a branch elsewhere is not moved without --force.
    again = importing.import_series(manifest, b_repo, tree=DictTree(PRISTINE))
    assert not again[0].changed
    sh(["update-ref", f"refs/heads/{BRANCH}", "main"], cwd=b_repo)
    with pytest.raises(GitError, match="exists at"):
        importing.import_series(manifest, b_repo, tree=DictTree(PRISTINE))
    forced = importing.import_series(manifest, b_repo, tree=DictTree(PRISTINE), force=True)
    assert forced[0].tip == a[0].tip


def test_a_work_tree_left_in_the_environment_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIT_WORK_TREE (as a git hook leaves it) pointing elsewhere: import --create makes the same
    repository and commits as without it (it failed with git's "Cannot access work tree")."""
    series, _fork = exported_series(tmp_path)
    manifest = load_manifest(series)
    plain = importing.import_series(manifest, tmp_path / "a", tree=DictTree(PRISTINE), create=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("GIT_WORK_TREE", str(elsewhere))
    leaked = importing.import_series(manifest, tmp_path / "b", tree=DictTree(PRISTINE), create=True)
    assert [r.commit for r in leaked[0].rows] == [r.commit for r in plain[0].rows]
    assert list(elsewhere.iterdir()) == []
    assert (tmp_path / "b/.git/config").read_bytes() == (tmp_path / "a/.git/config").read_bytes()


def test_import_refuses_to_move_a_checked_out_branch(tmp_path: Path) -> None:
    series, fork = exported_series(tmp_path)
    sh(["update-ref", f"refs/heads/{BRANCH}", f"{BRANCH}~1"], cwd=fork)
    with pytest.raises(GitError, match="checked out"):
        importing.import_series(load_manifest(series), fork, tree=DictTree(PRISTINE), force=True)


def test_module_row_exports_to_its_directory_and_imports_back(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    _base, shas = make_fork(fork)
    series = new_series(tmp_path / "series")
    export(series, fork)
    # Turn the new-module row into a module-file row whose files live under kvarn/files.
    path = series / "patches" / "manifest.yaml"
    text = path.read_text().replace("patch: patches/new-module.patch", "files: kvarn/files")
    path.write_text(text)
    os.remove(series / "patches" / "new-module.patch")
    plan = export(series, fork)
    assert [c.path for c in plan.changes if c.row == "new-module"] == [
        "kvarn/files/vllm/hqp/module.py"
    ]
    assert (series / "kvarn/files/vllm/hqp/module.py").read_bytes() == b"VALUE = 1\n"
    result = importing.import_series(
        load_manifest(series), tmp_path / "rebuilt", tree=DictTree(PRISTINE), create=True
    )
    assert tree_of(tmp_path / "rebuilt", result[0].tip) == tree_of(fork, shas[-1])


def test_import_under_hostile_config_gives_the_same_shas(
    tmp_path: Path, isolated_env: Path
) -> None:
    from fixtures_git import make_hostile

    series, _fork = exported_series(tmp_path)
    manifest = load_manifest(series)
    clean = importing.import_series(manifest, tmp_path / "a", tree=DictTree(PRISTINE), create=True)
    hostile_repo = tmp_path / "b"
    sh(["init", "-q", str(hostile_repo)], cwd=tmp_path)
    make_hostile(hostile_repo, isolated_env)  # commit.gpgSign, i18n.commitEncoding, autocrlf, ...
    hostile = importing.import_series(manifest, hostile_repo, tree=DictTree(PRISTINE))
    assert [r.commit for r in hostile[0].rows] == [r.commit for r in clean[0].rows]
    raw = sh(["cat-file", "commit", hostile[0].tip], cwd=hostile_repo)
    assert b"\nencoding " not in raw.split(b"\n\n")[0]


def test_import_of_a_row_that_does_not_apply_names_row_file_and_hunk(tmp_path: Path) -> None:
    from hyperqwen_patches.errors import FindingError

    series, fork = exported_series(tmp_path)
    broken = series / "patches" / "crlf-latin1.patch"
    broken.write_bytes(broken.read_bytes().replace(b" x = 1\n", b" x = 100\n"))
    before = sh(["for-each-ref"], cwd=fork)
    with pytest.raises(FindingError) as info:
        importing.import_series(load_manifest(series), fork, tree=DictTree(PRISTINE), force=True)
    assert info.value.message.startswith(
        "row crlf-latin1 does not apply at fuzz 0: vllm/nonl.py hunk(s) 1"
    )
    assert sh(["for-each-ref"], cwd=fork) == before  # no branch moved
