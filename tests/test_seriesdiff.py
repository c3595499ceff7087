"""``diff OLD NEW`` on real git repositories and real ``git format-patch`` output.

A small fork (base + one commit per row) is exported with git format-patch into a series repository
(``patches/series``); the fork is then re-cut the ways a maintainer re-cuts it (rebased onto a moved
base, a row edited, a row renamed, added, removed, reordered) and each re-cut is committed, so the two
revisions compared are real commits of a real repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.series.rangediff import (
    DirTree,
    SeriesRow,
    SeriesSnapshot,
    diff_series,
    fold_positional,
    load_snapshot,
    open_series_tree,
)


def git(cwd: Path, *args: str) -> str:
    # A fixed author date: a re-cut keeps the author date (rebase does), and a test that crosses a
    # second boundary between two cuts must not see a Date header change.
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "1700000000 +0000",
        "GIT_COMMITTER_DATE": "1700000000 +0000",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


ALPHA = "".join(f"alpha line {i}\n" for i in range(1, 31))
BETA = "".join(f"beta line {i}\n" for i in range(1, 31))


def make_fork(root: Path, *, prefix_lines: int = 0) -> Path:
    """A fork: base commit (vllm/alpha.py, vllm/beta.py) and three row commits."""
    fork = root / f"fork{prefix_lines}"
    fork.mkdir()
    git(fork, "init", "-q", "-b", "main")
    (fork / "vllm").mkdir()
    header = "".join(f"# moved {i}\n" for i in range(prefix_lines))
    (fork / "vllm/alpha.py").write_text(header + ALPHA)
    (fork / "vllm/beta.py").write_text(header + BETA)
    git(fork, "add", ".")
    git(fork, "commit", "-q", "-m", "base")
    return fork


def commit_row(fork: Path, subject: str, path: str, old: str, new: str) -> None:
    file = fork / path
    file.write_text(file.read_text().replace(old, new, 1))
    git(fork, "commit", "-q", "-am", subject)


def export(fork: Path, series_repo: Path, names: list[str]) -> None:
    """git format-patch base..HEAD into series_repo/patches with the given file names."""
    patches = series_repo / "patches"
    for old in patches.glob("*.patch"):
        old.unlink()
    patches.mkdir(parents=True, exist_ok=True)
    count = len(names)
    out = fork / "out"
    subprocess.run(
        ["git", "format-patch", "-q", f"HEAD~{count}..HEAD", "-o", str(out)],
        cwd=fork,
        check=True,
    )
    produced = sorted(out.iterdir())
    assert len(produced) == count
    for name, file in zip(names, produced, strict=True):
        (patches / f"{name}.patch").write_bytes(file.read_bytes())
        file.unlink()
    (patches / "series").write_text("".join(f"{n}.patch\n" for n in names))


@pytest.fixture
def series_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "series"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    return repo


def cut(repo: Path, message: str) -> str:
    git(repo, "add", "-A", "patches")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def first_cut(tmp_path: Path, repo: Path) -> str:
    fork = make_fork(tmp_path)
    commit_row(fork, "alpha fix", "vllm/alpha.py", "alpha line 10\n", "alpha line 10 fixed\n")
    commit_row(fork, "beta fix", "vllm/beta.py", "beta line 20\n", "beta line 20 fixed\n")
    commit_row(fork, "beta more", "vllm/beta.py", "beta line 5\n", "beta line 5 more\n")
    export(fork, repo, ["alpha-fix", "beta-fix", "beta-more"])
    return cut(repo, "cut 1")


def test_recut_on_moved_base_is_positional_only(tmp_path: Path, series_repo: Path) -> None:
    old = first_cut(tmp_path, series_repo)
    # Same changes, rebased onto a base where every file gained 7 lines at the top.
    fork = make_fork(tmp_path, prefix_lines=7)
    commit_row(fork, "alpha fix", "vllm/alpha.py", "alpha line 10\n", "alpha line 10 fixed\n")
    commit_row(fork, "beta fix", "vllm/beta.py", "beta line 20\n", "beta line 20 fixed\n")
    commit_row(fork, "beta more", "vllm/beta.py", "beta line 5\n", "beta line 5 more\n")
    export(fork, series_repo, ["alpha-fix", "beta-fix", "beta-more"])
    new = cut(series_repo, "cut 2")

    a = (series_repo / "patches/alpha-fix.patch").read_bytes()
    assert b"@@ -14,7 +14,7 @@" in a  # the re-cut really moved (10 + 7 - 3 context lines)

    result = diff_series(
        load_snapshot(open_series_tree(old, repo=series_repo)),
        load_snapshot(open_series_tree(new, repo=series_repo)),
    )
    assert [(r.name, r.status) for r in result.rows] == [
        ("alpha-fix", "positional"),
        ("beta-fix", "positional"),
        ("beta-more", "positional"),
    ]
    assert all(r.interdiff == b"" for r in result.rows)
    assert not result.semantic


def test_edit_rename_add_remove_reorder(tmp_path: Path, series_repo: Path) -> None:
    old = first_cut(tmp_path, series_repo)
    fork = make_fork(tmp_path, prefix_lines=2)
    # beta-more now comes first and is renamed; alpha-fix's content changed; beta-fix removed;
    # gamma added.
    commit_row(fork, "beta more", "vllm/beta.py", "beta line 5\n", "beta line 5 more\n")
    commit_row(fork, "alpha fix", "vllm/alpha.py", "alpha line 10\n", "alpha line 10 FIXED\n")
    commit_row(fork, "gamma", "vllm/alpha.py", "alpha line 25\n", "alpha line 25 gamma\n")
    export(fork, series_repo, ["beta-five", "alpha-fix", "gamma"])
    new = cut(series_repo, "cut 2")

    result = diff_series(
        load_snapshot(open_series_tree(old, repo=series_repo)),
        load_snapshot(open_series_tree(new, repo=series_repo)),
    )
    by_name = {r.name: r for r in result.rows}
    assert [(r.name, r.status) for r in result.rows] == [
        ("alpha-fix", "changed"),
        ("beta-fix", "removed"),
        ("beta-five", "renamed"),
        ("gamma", "added"),
    ]
    renamed = by_name["beta-five"]
    assert renamed.old is not None and renamed.old.name == "beta-more"
    assert renamed.drift == "positional" and renamed.similarity == 1.0
    changed = by_name["alpha-fix"]
    # The interdiff shows the one semantic change and no positions.
    text = changed.interdiff.decode()
    assert "--- old/alpha-fix" in text and "+++ new/alpha-fix" in text
    changed_lines = [
        line for line in text.splitlines() if line[:1] in "+-" and line[:3] not in ("---", "+++")
    ]
    assert changed_lines == ["-+alpha line 10 fixed", "++alpha line 10 FIXED"]
    # The patches' own hunk headers and index lines appear folded (no numbers, no hashes).
    body = text.splitlines()[3:]
    assert not any(line[1:].startswith("@@ -") for line in body)
    assert not any(line[1:].startswith("index ") for line in body)
    assert result.counts["renamed"] == 1 and result.semantic
    # alpha-fix was first and is second now, beta-five stayed relative to it: one of them moved.
    assert sorted(r.name for r in result.rows if r.moved) == ["beta-five"]


def test_uncommitted_state_is_not_read(tmp_path: Path, series_repo: Path) -> None:
    old = first_cut(tmp_path, series_repo)
    # Dirty the work tree and the index: a git revision reads only what is committed.
    patch = series_repo / "patches/alpha-fix.patch"
    patch.write_bytes(patch.read_bytes().replace(b"fixed", b"dirty"))
    (series_repo / "patches/stray.patch").write_text("junk\n")
    git(series_repo, "add", "patches/stray.patch")
    result = diff_series(
        load_snapshot(open_series_tree(old, repo=series_repo)),
        load_snapshot(open_series_tree("HEAD", repo=series_repo)),
    )
    assert {r.status for r in result.rows} == {"unchanged"}
    # While the directory reads the work tree as it is.
    on_disk = diff_series(
        load_snapshot(open_series_tree(old, repo=series_repo)),
        load_snapshot(DirTree(series_repo, "work tree")),
    )
    assert [r.status for r in on_disk.rows] == ["changed", "unchanged", "unchanged"]


def test_fold_keeps_function_context_and_mode() -> None:
    patch = (
        b"From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001\n"
        b"Subject: [PATCH v2 3/12] x: fix [PATCH 1/2]\n"
        b"diff --git a/x b/x\n"
        b"index 1a2b3c4..5d6e7f8 100644\n"
        b"--- a/x\n+++ b/x\n"
        b"@@ -10,3 +12,4 @@ def f():\r\n"
        b" a\n+b\n"
    )
    assert fold_positional(patch) == (
        b"From\n"
        b"Subject: [PATCH v2] x: fix [PATCH 1/2]\n"
        b"diff --git a/x b/x\n"
        b"index 100644\n"
        b"--- a/x\n+++ b/x\n"
        b"@@ def f():\r\n"
        b" a\n+b\n"
    )
    # A mode change in the index line is content, not position.
    other = patch.replace(b"100644", b"100755")
    assert fold_positional(patch) != fold_positional(other)


def test_module_file_rows_compare_by_files() -> None:
    def snap(files: dict[bytes, bytes]) -> SeriesSnapshot:
        return SeriesSnapshot(
            "x", (SeriesRow("mods", 1, "files", b"kvarn/files", files=files),), pin="0.29.0"
        )

    same = diff_series(snap({b"vllm/k.py": b"a\n"}), snap({b"vllm/k.py": b"a\n"}))
    assert same.rows[0].status == "unchanged"
    changed = diff_series(
        snap({b"vllm/k.py": b"a\n"}), snap({b"vllm/k.py": b"b\n", b"vllm/n.py": b"n\n"})
    )
    assert changed.rows[0].status == "changed"
    assert changed.rows[0].interdiff == (
        b"--- old/vllm/k.py\n+++ new/vllm/k.py\n@@ -1 +1 @@\n-a\n+b\n"
        b"--- /dev/null\n+++ new/vllm/n.py\n@@ -0,0 +1 @@\n+n\n"
    )


def test_bad_specs(tmp_path: Path, series_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first_cut(tmp_path, series_repo)
    with pytest.raises(UsageError, match="neither a directory nor a git revision"):
        open_series_tree("no-such-thing", repo=series_repo)
    with pytest.raises(UsageError, match="not a commit"):
        open_series_tree("git:no-such-rev", repo=series_repo)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="no series here"):
        load_snapshot(open_series_tree(f"dir:{empty}", repo=series_repo))
    # A series file naming a patch that does not exist names the file and line.
    (empty / "series").write_text("# comment\n\nmissing.patch -p1\n")
    with pytest.raises(UsageError, match=r"series line 3: missing.patch does not exist"):
        load_snapshot(open_series_tree(f"dir:{empty}", repo=series_repo))
    # A name that is both a directory and a revision must be disambiguated.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "main").mkdir()
    with pytest.raises(UsageError, match="both a directory and a git revision"):
        open_series_tree("main", repo=series_repo)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_cli_table_json_and_exit_codes(tmp_path: Path, series_repo: Path) -> None:
    old = first_cut(tmp_path, series_repo)
    patch = series_repo / "patches/beta-fix.patch"
    patch.write_bytes(patch.read_bytes().replace(b"20 fixed", b"20 refixed"))
    new = cut(series_repo, "cut 2")

    shown = run_cli("diff", old, new, cwd=series_repo)
    assert shown.returncode == 0, shown.stderr
    assert "beta-fix" in shown.stdout and "changed" in shown.stdout
    assert "interdiff: beta-fix" in shown.stdout and "++beta line 20 refixed" in shown.stdout

    as_json = run_cli("diff", old, new, "--json", cwd=series_repo)
    doc = json.loads(as_json.stdout)
    assert [(r["name"], r["status"]) for r in doc["rows"]] == [
        ("alpha-fix", "unchanged"),
        ("beta-fix", "changed"),
        ("beta-more", "unchanged"),
    ]
    assert doc["semantic"] is True and doc["counts"]["changed"] == 1

    assert run_cli("diff", old, new, "--exit-code", cwd=series_repo).returncode == 1
    assert run_cli("diff", old, old, "--exit-code", cwd=series_repo).returncode == 0
    bad = run_cli("diff", old, "nope", cwd=series_repo)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: 'nope' is neither a directory nor a git revision")


MANIFEST = """format: 1
pin: "0.29.0"
package: vllm
rows:
  - name: fix-a
    kind: fix
    what: {what}
    cut_against: "0.29.0"
    retires_when: upstream fixes it
    patch: patches/fix-a.patch
  - name: mods
    kind: own
    what: module files
    cut_against: "0.29.0"
    retires_when: never
    files: kvarn/files
"""


def test_manifest_rows_module_files_and_metadata(tmp_path: Path, series_repo: Path) -> None:
    fork = make_fork(tmp_path)
    commit_row(fork, "alpha fix", "vllm/alpha.py", "alpha line 10\n", "alpha line 10 fixed\n")
    export(fork, series_repo, ["fix-a"])
    (series_repo / "patches/series").unlink()
    mods = series_repo / "kvarn/files/vllm/kv"
    mods.mkdir(parents=True)
    (mods / "k.py").write_bytes(b"K = 1\n")
    (series_repo / "patches/manifest.yaml").write_text(MANIFEST.format(what="the first fix"))
    git(series_repo, "add", "-A")
    git(series_repo, "commit", "-qm", "cut 1")
    old = git(series_repo, "rev-parse", "HEAD")
    (mods / "k.py").write_bytes(b"K = 2\n")
    (series_repo / "patches/manifest.yaml").write_text(
        MANIFEST.format(what="the same fix, reworded")
    )
    git(series_repo, "commit", "-qam", "cut 2")

    result = diff_series(
        load_snapshot(open_series_tree(old, repo=series_repo)),
        load_snapshot(open_series_tree("HEAD", repo=series_repo)),
    )
    assert result.old_pin == result.new_pin == "0.29.0"
    fix, mods_row = result.rows
    assert (fix.name, fix.status) == ("fix-a", "unchanged")
    assert fix.metadata_changes == (("what", "the first fix", "the same fix, reworded"),)
    assert (mods_row.name, mods_row.status) == ("mods", "changed")
    assert mods_row.old is not None and dict(mods_row.old.files) == {b"vllm/kv/k.py": b"K = 1\n"}
    assert mods_row.interdiff == (
        b"--- old/vllm/kv/k.py\n+++ new/vllm/kv/k.py\n@@ -1 +1 @@\n-K = 1\n+K = 2\n"
    )
    # The same tree read as a directory gives the same snapshot as the revision.
    on_disk = load_snapshot(open_series_tree(f"dir:{series_repo}", repo=series_repo))
    at_head = load_snapshot(open_series_tree("git:HEAD", repo=series_repo))
    assert [(r.name, r.content, dict(r.files)) for r in on_disk.rows] == [
        (r.name, r.content, dict(r.files)) for r in at_head.rows
    ]


FORMAT_OLD = b"""--- a/vllm/x.py
+++ b/vllm/x.py
@@ -1,4 +1,4 @@
 a = 1
 b = 2
-c = 3
+c = 4
 d = 5
"""
# The same removed and added lines, with a preamble and less context: what a hand-kept file and the
# tool's export differ by (issue #38's first export after adopt).
FORMAT_NEW = b"""Fix c.

Kind: fix
---
--- a/vllm/x.py
+++ b/vllm/x.py
@@ -2,3 +2,3 @@
 b = 2
-c = 3
+c = 4
 d = 5
"""
SEMANTIC_NEW = FORMAT_OLD.replace(b"+c = 4", b"+c = 5")


@pytest.mark.parametrize(
    ("new", "status", "drift", "export_drift"),
    [
        (FORMAT_OLD, "unchanged", "none", "unchanged"),
        (
            FORMAT_OLD.replace(b"@@ -1,4 +1,4 @@", b"@@ -9,4 +9,4 @@"),
            "positional",
            "positional",
            "positional",
        ),
        (FORMAT_NEW, "reformatted", "format", "format"),
        (SEMANTIC_NEW, "changed", "semantic", "semantic"),
    ],
)
def test_diff_and_export_read_a_rows_drift_by_one_rule(
    new: bytes, status: str, drift: str, export_drift: str
) -> None:
    """`diff` and `export`/`check` say the same of the same two texts of a row (#41: `diff` called
    a format-only change semantic where export said format)."""
    from hyperqwen_patches.fork.exportplan import classify

    def snap(content: bytes) -> SeriesSnapshot:
        return SeriesSnapshot(
            "x", (SeriesRow("r", 1, "patch", b"patches/r.patch", content=content),), pin="0.29.0"
        )

    result = diff_series(snap(FORMAT_OLD), snap(new))
    assert (result.rows[0].status, result.rows[0].drift) == (status, drift)
    assert classify(FORMAT_OLD, new) == export_drift
    assert result.semantic == (drift == "semantic")
    assert bool(result.rows[0].interdiff) == (drift in ("format", "semantic"))
