"""``adopt`` reads preambles as real series write them, patch files given to ``--append``, and export
markers; the first ``export`` after it tells a format change from a semantic one.

The incident (#38): a preamble with the prose line ``kind: fix. Retires when upstream takes it.`` in
its first paragraph and the real header block 30 lines below, before its ``--- exported from <sha>
(<row>); regenerate ... ---`` marker, was refused as "a second Kind: line"; ``--append`` of a patch
file read it as a list and refused its first word as an option; no export point was written, so
``import`` refused right after ``adopt``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from realseries import Project, write_project

from hyperqwen_patches.fork.exportplan import classify
from hyperqwen_patches.series.adopt import AdoptError, plan_adopt
from hyperqwen_patches.series.knobcomments import comment_above

DIFF = (
    "diff --git a/vllm/a.py b/vllm/a.py\n"
    "--- a/vllm/a.py\n"
    "+++ b/vllm/a.py\n"
    "@@ -1,3 +1,3 @@\n"
    " one\n"
    "-two\n"
    "+TWO\n"
    " three\n"
)
PROSE = "kind: fix. Retires when upstream takes it."
MARKER = (
    "--- exported from 1afa72741 (fix-budget); regenerate with tools/export.sh, do not edit ---\n"
)


def repo(tmp_path: Path, preambles: dict[str, str], series: str | None = None) -> Path:
    root = tmp_path / "repo"
    (root / "patches").mkdir(parents=True)
    for name, preamble in preambles.items():
        (root / "patches" / name).write_text(preamble + DIFF, encoding="utf-8")
    (root / "patches/series").write_text(series or "".join(f"{n}\n" for n in preambles))
    return root


def plan(root: Path, *appends: str, pin: str | None = "0.31.0"):
    return plan_adopt(
        root, root / "patches/series", pin=pin, appends=tuple(root / a for a in appends)
    )


REAL = (
    "Budget fix for the warm-up.\n"
    "\n"
    "We found the scheduler read the wrong budget while profiling;\n"
    "kind: fix. Retires when upstream takes it.\n"
    "More prose follows, for a while.\n"
    "\n" + "".join(f"Prose line {i}: it goes on.\n" for i in range(20)) + "\n"
    "Kind: fix\n"
    "What: profile memory after the warm-up,\n"
    "  continued on an indented line\n"
    "Upstream: https://github.com/vllm-project/vllm/pull/54646\n"
    "Cut-against: 0.30.0, hand-resolved against #54646 (a long note)\n"
    "Retires-when: upstream merges #54646\n"
    "\n" + MARKER
)


def test_the_last_header_block_before_the_marker_is_read(tmp_path: Path) -> None:
    root = repo(tmp_path, {"0001-fix-budget.patch": REAL})
    (row,) = plan(root).rows
    assert row.kind == "fix"
    assert row.what == "profile memory after the warm-up, continued on an indented line"
    assert row.upstream == "https://github.com/vllm-project/vllm/pull/54646"
    assert row.cut_against == "0.30.0, hand-resolved against #54646 (a long note)"
    assert row.retires_when == "upstream merges #54646"
    assert row.unset == ()


def test_a_prose_paragraph_like_a_header_loses_to_the_last_block(tmp_path: Path) -> None:
    first = f"{PROSE}\n\nMore prose.\n\nKind: feature\nWhat: the real block\n\n" + MARKER
    (row,) = plan(repo(tmp_path, {"0001-x.patch": first})).rows
    assert (row.kind, row.what) == ("feature", "the real block")


def test_a_block_right_before_the_marker_needs_no_blank_line_above(tmp_path: Path) -> None:
    tight = (
        f"Prose that runs on.\n{PROSE}\nStill prose, then the block:\nKind: feature\nWhat: tight\n"
        + MARKER
    )
    (row,) = plan(repo(tmp_path, {"0001-x.patch": tight})).rows
    assert (row.kind, row.what) == ("feature", "tight")


def test_a_header_block_in_any_case(tmp_path: Path) -> None:
    lower = "Prose.\n\nkind: feature\nwhat: a lower-case block\nretires-when: never\n\n---\n"
    (row,) = plan(repo(tmp_path, {"0001-x.patch": lower})).rows
    assert (row.kind, row.what, row.retires_when) == ("feature", "a lower-case block", "never")


def test_a_prose_line_alone_is_not_a_header_block(tmp_path: Path) -> None:
    prose = "We did this because\nkind: fix. Retires when upstream takes it.\nEnd of prose.\n\n"
    (row,) = plan(repo(tmp_path, {"0001-x.patch": prose})).rows
    assert row.kind == "local" and "kind" in row.unset


def test_a_genuine_duplicate_in_the_block_is_refused_by_line(tmp_path: Path) -> None:
    dup = "Prose.\n\nKind: fix\nWhat: x\nKind: feature\n\n" + MARKER
    with pytest.raises(AdoptError, match=r"patches/0001-x.patch:5: a second Kind: line .*line 3"):
        plan(repo(tmp_path, {"0001-x.patch": dup}))


def test_commit_markers_give_one_export_point_after_the_pin(tmp_path: Path) -> None:
    p = plan(repo(tmp_path, {"0001-a.patch": REAL, "0002-b.patch": "Prose.\n\n"}))
    assert p.export_points == (("vllm-0.31.0", "vllm-0.31.0", "none named: after the pin"),)
    assert all(r.export_point is None for r in p.rows)  # one point: rows belong to it


def test_branch_markers_give_export_points(tmp_path: Path) -> None:
    a = "A.\n\nexported from qwen38/0.29 " + "a" * 40 + "\n\n"
    b = "B.\n\n--- exported from team/kv@0123abcd ---\n"
    root = repo(tmp_path, {"0001-a.patch": a, "0002-b.patch": "No marker.\n\n", "0003-c.patch": b})
    p = plan(root)
    assert [(n, br) for n, br, _ in p.export_points] == [
        ("qwen38-0.29", "qwen38/0.29"),
        ("team-kv", "team/kv"),
    ]
    assert [r.export_point for r in p.rows] == ["qwen38-0.29", "qwen38-0.29", "team-kv"]
    assert "export_point: team-kv" in p.files["patches/manifest.yaml"].decode()


def test_append_takes_a_patch_file_as_one_row(tmp_path: Path) -> None:
    root = repo(tmp_path, {"0001-a.patch": "A.\n\n"})
    extra = root / "kvarn/0001-dense.patch"
    extra.parent.mkdir()
    # Its first line would read as "dense" plus options if it were taken for a list file.
    extra.write_text(
        "dense attention: use the packed layout -p0\n\n" + DIFF.replace("a.py", "b.py")
    )
    listed = root / "kvarn/order.txt"
    listed.write_text("# a list file\n0001-dense.patch\n")
    by_patch = plan(root, "kvarn/0001-dense.patch")
    assert [r.patch for r in by_patch.rows] == ["patches/0001-a.patch", "kvarn/0001-dense.patch"]
    assert by_patch.rows[1].origin == "--append kvarn/0001-dense.patch"
    by_list = plan(root, "kvarn/order.txt")
    assert [r.patch for r in by_list.rows] == [r.patch for r in by_patch.rows]


def test_the_series_files_comments_and_p1_are_rendered_back(tmp_path: Path) -> None:
    series = "# our series\n\n# --- memory ---\n0001-a.patch -p1\n\n# later\n0002-b.patch\n"
    root = repo(tmp_path, {"0001-a.patch": "A.\n\n", "0002-b.patch": "B.\n\n"}, series)
    rendered = plan(root).files["patches/series"].decode()
    body = [line for line in rendered.splitlines()][5:]
    assert body == series.splitlines()


def test_no_pin_anywhere_takes_the_rows_cut_against(tmp_path: Path) -> None:
    root = repo(tmp_path, {"0001-fix-budget.patch": REAL})
    p = plan(root, pin=None)
    assert (p.pin, p.pin_from) == (
        "0.30.0",
        "the rows' Cut-against: (patches/0001-fix-budget.patch:32)",
    )
    assert p.requirements == "docker/requirements.txt"  # absent: check says "not present"


def test_comment_above_needs_the_rows_own_comment() -> None:
    lines = [
        ("    ignored = {", False),
        ('        "VLLM_OLD",', False),
        ("        # Runtime only; no generated code reads it.", True),
        ('        "VLLM_A",', True),
        ('        "VLLM_B",  # a remark is not a declaration', True),
    ]
    assert comment_above(lines, 4) == "Runtime only; no generated code reads it."
    assert comment_above(lines, 1) is None  # a pristine line
    assert comment_above([(t, o) for t, o in lines if not t.strip().startswith("#")], 3) is None
    someone_elses = [*lines[:2], (lines[2][0], False), *lines[3:]]
    assert comment_above(someone_elses, 3) is None


HAND = (
    "Kept by hand.\n\nKind: fix\n\n"
    + MARKER
    + ("--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,4 +1,4 @@\n zero\n one\n-two\n+TWO\n three\n")
)
EXPORTED = (
    "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
    "Subject: [PATCH] fix-budget\n\n"
    "diff --git a/vllm/a.py b/vllm/a.py\nindex 1111111..2222222 100644\n"
    "--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -2,3 +2,3 @@ def f():\n one\n-two\n+TWO\n three\n"
)


def test_format_drift_is_the_same_changes_written_another_way() -> None:
    assert classify(HAND.encode(), EXPORTED.encode()) == "format"
    changed = EXPORTED.replace("+TWO", "+TW0")
    assert classify(HAND.encode(), changed.encode()) == "semantic"
    other_file = EXPORTED.replace("vllm/a.py", "vllm/b.py")
    assert classify(HAND.encode(), other_file.encode()) == "semantic"
    # The same lines changed at another place (other neighbours) is another change.
    elsewhere = EXPORTED.replace(" one\n-two\n+TWO\n three\n", " uno\n-two\n+TWO\n tres\n")
    assert classify(HAND.encode(), elsewhere.encode()) == "semantic"


def test_a_plain_diffs_new_or_deleted_file_is_format_drift_against_gits_mode_lines() -> None:
    """The 52-file series' row 6 creates a file with a plain `--- /dev/null` diff; export writes
    `new file mode 100644` for it: the same change (GNU patch and the engine create it 0644), not
    semantic drift. A created file git says is executable is another change."""
    body = "@@ -0,0 +1,2 @@\n+one\n+two\n"
    plain = "Prose.\n\n--- /dev/null\n+++ b/vllm/n.py\n" + body
    git = (
        "Subject: [PATCH] x\n\ndiff --git a/vllm/n.py b/vllm/n.py\nnew file mode 100644\n"
        "index 0000000..1111111\n--- /dev/null\n+++ b/vllm/n.py\n" + body
    )
    assert classify(plain.encode(), git.encode()) == "format"
    executable = git.replace("new file mode 100644", "new file mode 100755")
    assert classify(plain.encode(), executable.encode()) == "semantic"
    gone = "--- a/vllm/n.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-one\n-two\n"
    git_gone = (
        "diff --git a/vllm/n.py b/vllm/n.py\ndeleted file mode 100755\nindex 1111111..0000000\n"
        + gone
    )
    assert classify(gone.encode(), git_gone.encode()) == "format"


@pytest.fixture(scope="module")
def realseries(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return write_project(tmp_path_factory.mktemp("realseries"))


def test_the_bash_array_files_one_by_one(realseries: Project, tmp_path: Path) -> None:
    """The 52-file series' last four files, passed as --append one by one (no list file)."""
    root = tmp_path / "project"
    shutil.copytree(realseries.root, root)
    listed = plan_adopt(root, root / "patches/series", appends=(root / "kvarn/apply-order",))
    files = [root / f for f in realseries.series_files[48:]]
    one_by_one = plan_adopt(root, root / "patches/series", appends=tuple(files))
    assert [r.patch for r in one_by_one.rows] == [r.patch for r in listed.rows]
    assert one_by_one.rows[-1].origin == f"--append {realseries.series_files[-1]}"
