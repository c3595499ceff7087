"""Parsing patch files: git-style and plain diffs, byte exact, with clear errors on bad input."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import unidiff
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperqwen_patches.engine.applying import apply_series
from hyperqwen_patches.engine.patchmodel import (
    ADDED,
    CONTEXT,
    REMOVED,
    PatchParseError,
    _reorder_reversed,
    split_lines,
)
from hyperqwen_patches.engine.patchscan import parse_patch, patch_from_files

FORMAT_PATCH = (
    b"""From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A U Thor <author@example.invalid>
Date: Thu, 1 Jan 2026 00:00:00 +0000
Subject: [PATCH] memory: profile after warmup

Kind: fix
--- exported from fork/main ---
A message line that looks like a header:
--- not a file header, no +++ follows
---
 vllm/envs.py | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/vllm/envs.py b/vllm/envs.py
index 1111111..2222222 100644
--- a/vllm/envs.py
+++ b/vllm/envs.py
@@ -1,3 +1,3 @@
 import os
-A = 1
+A = 2
 B = 3
diff --git a/vllm/new.py b/vllm/new.py
new file mode 100755
index 0000000..3333333
--- /dev/null
+++ b/vllm/new.py
@@ -0,0 +1,2 @@
+#!/usr/bin/env python
+print("hi")
diff --git a/vllm/gone.py b/vllm/gone.py
deleted file mode 100644
index 4444444..0000000
--- a/vllm/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-x = 1
diff --git a/vllm/old_name.py b/vllm/new_name.py
similarity index 100%
rename from vllm/old_name.py
rename to vllm/new_name.py
diff --git a/vllm/run.sh b/vllm/run.sh
old mode 100644
new mode 100755
diff --git a/vllm/empty.py b/vllm/empty.py
new file mode 100644
index 0000000..e69de29
"""
    + b"-- \n2.39.0\n\n"
)  # format-patch's signature: "-- " with a trailing space


def test_git_format_patch_with_extended_headers() -> None:
    patch = parse_patch(FORMAT_PATCH, name="0001.patch")
    assert patch.preamble.startswith(b"From 0000")
    assert b"--- not a file header" in patch.preamble  # text before the first diff is not a file
    actions = [(f.action, f.old_path, f.new_path) for f in patch.files]
    assert actions == [
        ("modify", b"vllm/envs.py", b"vllm/envs.py"),
        ("create", None, b"vllm/new.py"),
        ("delete", b"vllm/gone.py", None),
        ("rename", b"vllm/old_name.py", b"vllm/new_name.py"),
        ("modify", b"vllm/run.sh", b"vllm/run.sh"),
        ("create", None, b"vllm/empty.py"),
    ]
    new, mode_change = patch.files[1], patch.files[4]
    assert new.new_mode == 0o100755
    assert (mode_change.old_mode, mode_change.new_mode, mode_change.hunks) == (
        0o100644,
        0o100755,
        (),
    )
    (hunk,) = patch.files[0].hunks
    assert (hunk.old_start, hunk.old_len, hunk.new_start, hunk.new_len) == (1, 3, 1, 3)
    assert hunk.lines == (
        (CONTEXT, b"import os\n"),
        (REMOVED, b"A = 1\n"),
        (ADDED, b"A = 2\n"),
        (CONTEXT, b"B = 3\n"),
    )
    assert hunk.patch_line == FORMAT_PATCH.split(b"\n").index(b"@@ -1,3 +1,3 @@") + 1


def test_file_chosen_from_the_minus_plus_names_not_the_diff_git_line() -> None:
    data = b"diff --git a/one.py b/one.py\n--- a/two.py\n+++ b/two.py\n@@ -1 +1 @@\n-a\n+b\n"
    (file,) = parse_patch(data, name="p").files
    assert file.old_path == file.new_path == b"two.py"


def test_no_newline_marker_strips_the_line_it_follows_and_crlf_is_kept() -> None:
    data = (
        b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n\\ No newline at end of file\n"
        b"+B\r\n\\ No newline at end of file\n"
    )
    (hunk,) = parse_patch(data, name="p").files[0].hunks
    # The marker removes the LF only: the file's last bytes are "b\r" (GNU patch reads it so too).
    assert hunk.lines == ((CONTEXT, b"a\r\n"), (REMOVED, b"b\r"), (ADDED, b"B\r"))


def test_empty_line_inside_a_hunk_is_context() -> None:
    data = b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-c\n+C\n"
    (hunk,) = parse_patch(data, name="p").files[0].hunks
    assert hunk.lines[1] == (CONTEXT, b"\n")


def test_non_utf8_bytes_are_kept() -> None:
    data = b"--- a/caf\xe9.py\n+++ b/caf\xe9.py\n@@ -1 +1 @@\n-na\xefve\n+\xff\n"
    (file,) = parse_patch(data, name="p").files
    assert file.new_path == b"caf\xe9.py"
    assert file.hunks[0].new_lines == (b"\xff\n",)


def test_quoted_git_names_are_unquoted_byte_for_byte() -> None:
    data = (
        b'diff --git "a/caf\\303\\251.py" "b/caf\\303\\251.py"\n'
        b'--- "a/caf\\303\\251.py"\n+++ "b/caf\\303\\251.py"\n@@ -1 +1 @@\n-a\n+b\n'
    )
    (file,) = parse_patch(data, name="p").files
    assert file.new_path == "café.py".encode()


def test_timestamps_after_a_tab_are_ignored() -> None:
    data = b"--- a/f\t2026-01-01 00:00:00\n+++ b/f\t2026-01-01 00:00:01\n@@ -1 +1 @@\n-a\n+b\n"
    assert parse_patch(data, name="p").files[0].new_path == b"f"


def test_strip_levels() -> None:
    data = b"--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert parse_patch(data, name="p", strip=2).files[0].new_path == b"envs.py"
    raw = parse_patch(data, name="p", strip=0).files[0]
    assert (raw.old_path, raw.new_path) == (b"a/vllm/envs.py", b"b/vllm/envs.py")


def test_agrees_with_unidiff_on_hunk_structure() -> None:
    """unidiff (a runtime dependency) as an independent reading of a well-formed diff."""
    body = FORMAT_PATCH.split(b"\n\ndiff --git", 1)[1]
    text = b"diff --git" + body.split(b"diff --git a/vllm/old_name.py")[0]
    ours = parse_patch(text, name="p")
    theirs = unidiff.PatchSet(text.decode())
    assert len(ours.files) == len(theirs)
    for mine, other in zip(ours.files, theirs, strict=True):
        assert len(mine.hunks) == len(other)
        for hunk, other_hunk in zip(mine.hunks, other, strict=True):
            assert (hunk.old_start, hunk.old_len, hunk.new_start, hunk.new_len) == (
                other_hunk.source_start,
                other_hunk.source_length,
                other_hunk.target_start,
                other_hunk.target_length,
            )
            kinds = [chr(kind) for kind, _ in hunk.lines]
            assert kinds == [line.line_type for line in other_hunk]


@pytest.mark.parametrize(
    ("data", "line", "words"),
    [
        (b"", None, "empty patch"),
        (b"just a commit message\n---\nno diff here\n", None, "no file headers"),
        (b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n", 3, "truncated"),
        (b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n+d\n", 7, "more lines than its header"),
        (b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n?garbage\n", 5, "malformed hunk #1"),
        (b"--- a/f\n+++ b/f\n@@ -x +1 @@\n-a\n+b\n", 3, "malformed hunk header"),
        (b"--- a/f\n+++ b/f\n@@ -1,0 +1,0 @@\n", 3, "empty"),
        (b"--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", 1, "'..'"),
        (b"--- a//etc/passwd\n+++ b//etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", None, None),
        (b"--- nodir\n+++ nodir\n@@ -1 +1 @@\n-a\n+b\n", 1, "fewer than 1 leading"),
        (
            b"diff --git a/img.png b/img.png\nindex 1..2 100644\nBinary files a/img.png and b/img.png differ\n",
            1,
            "binary diff for b/img.png",
        ),
        (
            b"diff --git a/img.png b/img.png\nindex 1..2 100644\nGIT binary patch\nliteral 4\nLcmZ>\n\n",
            1,
            "binary",
        ),
        (b"diff --git a/f b/f\nold mode 10064\nnew mode 100755\n", 2, "bad file mode"),
        (b"--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", 1, "both sides"),
    ],
)
def test_bad_input_is_a_located_error(data: bytes, line: int | None, words: str | None) -> None:
    if words is None:
        # GNU patch strips 'a/' and then the extra slash: a//etc/passwd is etc/passwd, relative.
        assert parse_patch(data, name="bad.patch").files[0].new_path == b"etc/passwd"
        return
    with pytest.raises(PatchParseError) as caught:
        parse_patch(data, name="bad.patch")
    error = caught.value
    assert error.patch == "bad.patch"
    assert error.line == line
    assert words in error.message
    assert error.message.startswith("bad.patch")


def test_absolute_path_with_strip_zero_is_refused() -> None:
    data = b"--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(PatchParseError, match="absolute"):
        parse_patch(data, name="p", strip=0)


def test_patch_from_files_builds_creations() -> None:
    patch = patch_from_files("kvarn-modules", {b"vllm/b.py": b"b\n", b"vllm/a.py": b"a\nno-eol"})
    assert [f.new_path for f in patch.files] == [b"vllm/a.py", b"vllm/b.py"]
    assert all(f.action == "create" and f.old_path is None for f in patch.files)
    assert patch.files[0].hunks[0].new_lines == (b"a\n", b"no-eol")
    with pytest.raises(PatchParseError, match=r"'\.\.'"):
        patch_from_files("bad", {b"../x.py": b""})


def test_reversed_patch_swaps_sides() -> None:
    data = b"--- a/f\n+++ b/f\n@@ -3,3 +3,4 @@\n a\n-b\n+B\n+B2\n c\n"
    patch = parse_patch(data, name="p")
    (hunk,) = patch.reversed().files[0].hunks
    assert (hunk.old_start, hunk.old_len, hunk.new_start, hunk.new_len) == (3, 4, 3, 3)
    assert hunk.old_lines == (b"a\n", b"B\n", b"B2\n", b"c\n")
    assert hunk.new_lines == (b"a\n", b"b\n", b"c\n")


def test_split_lines_splits_on_newline_only() -> None:
    assert split_lines(b"a\r\nb\rc\nd") == [b"a\r\n", b"b\rc\n", b"d"]
    assert split_lines(b"") == []


def test_a_crlf_plus_line_strips_the_cr_of_every_hunk_line_as_gnu_patch_does() -> None:
    """GNU patch 2.7.6 strips the CR of every line of such a file's hunks ("Stripping trailing CRs
    from patch"): the patch applies to the LF file and fails on the CRLF one; so do we
    (tests/test_crlf_patches.py holds every pattern to the binary)."""
    from test_differential_gnu import run_gnu

    data = b"--- a/f\r\n+++ b/f\r\n@@ -1,3 +1,3 @@\r\n a\r\n-b\r\n+B\r\n c\r\n"
    (fp,) = parse_patch(data, name="mangled.patch").files
    assert fp.crlf_stripped and fp.path == b"f"
    assert fp.hunks[0].old_lines == (b"a\n", b"b\n", b"c\n")
    assert fp.hunks[0].new_lines == (b"a\n", b"B\n", b"c\n")
    lf_tree = run_gnu({b"f": b"a\nb\nc\n"}, data)
    assert "Stripping trailing CRs" in lf_tree.output and lf_tree.tree[b"f"] == b"a\nB\nc\n"
    assert run_gnu({b"f": b"a\r\nb\r\nc\r\n"}, data).rc == 1


def test_extra_hunk_lines_are_refused_where_gnu_patch_drops_them() -> None:
    """Deliberate difference (docs/engine.md): GNU patch ignores a '+' line after a hunk's counts are
    met, so the added line silently goes missing; we refuse the patch and name the line."""
    from test_differential_gnu import run_gnu

    data = b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n+d\n"
    gnu = run_gnu({b"f": b"a\nb\n"}, data)
    assert gnu.rc == 0 and gnu.tree[b"f"] == b"a\nc\n"  # "+d" lost without a word
    with pytest.raises(PatchParseError, match="more lines than its header") as caught:
        parse_patch(data, name="p")
    assert caught.value.line == 7


def test_parser_derived_fields_equal_the_constructor_ones() -> None:
    """The parser computes old/new lines and context counts in its one pass (speed); a Hunk built
    directly (reversed(), patch_from_files, other modules) derives them itself: they must agree."""
    from hyperqwen_patches.engine.patchmodel import Hunk

    data = FORMAT_PATCH + (
        b"--- a/g\n+++ b/g\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n c\n-d\n\\ No newline at end of file\n"
        b"+D\n\\ No newline at end of file\n--- a/h\n+++ b/h\n@@ -2,2 +2,3 @@\n x\n+y\n z\n"
    )
    hunks = [h for f in parse_patch(data, name="p").files for h in f.hunks]
    assert len(hunks) == 5
    for hunk in hunks:
        built = Hunk(
            hunk.number,
            hunk.old_start,
            hunk.old_len,
            hunk.new_start,
            hunk.new_len,
            hunk.lines,
            hunk.patch_line,
        )
        for attr in ("old_lines", "new_lines", "prefix_context", "suffix_context", "anchor"):
            assert getattr(built, attr) == getattr(hunk, attr), attr
        assert built == hunk


@st.composite
def mangled_patch(draw: st.DrawFn) -> bytes:
    """A valid patch with lines dropped, duplicated or replaced by garbage, as a bad copy makes."""
    lines = FORMAT_PATCH.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "dup", "garbage", "truncate"]))
        if action == "drop":
            del lines[pos]
        elif action == "dup":
            lines.insert(pos, lines[pos])
        elif action == "garbage":
            lines[pos] = draw(st.binary(max_size=12)) + b"\n"
        else:
            lines = lines[:pos]
        if not lines:
            break
    return b"".join(lines)


@settings(
    max_examples=int(os.environ.get("HQP_PARSE_EXAMPLES", "300")), deadline=None, derandomize=True
)
@given(st.one_of(mangled_patch(), st.binary(max_size=200)))
def test_any_input_parses_or_raises_a_located_parse_error(data: bytes) -> None:
    """Bad input never escapes as a crash: a PatchParseError naming the patch, or a valid Patch that
    the engine then applies or refuses without raising."""
    try:
        patch = parse_patch(data, name="mangled.patch")
    except PatchParseError as error:
        assert error.message.startswith("mangled.patch")
        return
    tree = {b"vllm/envs.py": b"import os\nA = 1\nB = 3\n", b"vllm/gone.py": b"x = 1\n"}
    apply_series([patch], tree.get)


@pytest.mark.parametrize(
    ("source", "target"),
    [(b"rename from", b"rename to"), (b"rename old", b"rename new"), (b"copy from", b"copy to")],
)
def test_every_spelling_of_a_rename_or_copy_keeps_both_paths_whole(
    source: bytes, target: bytes, tmp_path: Path
) -> None:
    """git writes "rename from/to"; older gits "rename old/new" (git apply still reads both); a copy
    is "copy from/to". Each path is what follows its own prefix, and git apply agrees."""
    text = (
        b"diff --git a/vllm/x.py b/vllm/y.py\nsimilarity index 90%\n"
        + source + b" vllm/x.py\n" + target + b" vllm/y.py\n"
        + b"--- a/vllm/x.py\n+++ b/vllm/y.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n"
    )  # fmt: skip
    (changed,) = parse_patch(text, name="r.patch").files
    assert (changed.old_path, changed.new_path) == (b"vllm/x.py", b"vllm/y.py")
    # the oracle: git apply reads the same two paths
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm/x.py").write_bytes(b"a = 1\nb = 2\n")
    (tmp_path / "r.patch").write_bytes(text)
    done = subprocess.run(
        ["git", "apply", "--numstat", "--summary", "r.patch"], cwd=tmp_path,
        capture_output=True, check=True,
    )  # fmt: skip
    assert b"vllm/{x.py => y.py}" in done.stdout


def test_reversed_derived_fields_equal_the_constructor_ones() -> None:
    """``Hunk.reversed`` takes its derived fields from the forward hunk (sides swapped, context runs
    kept) instead of deriving them again (speed): a Hunk built from the reversed lines agrees."""
    from hyperqwen_patches.engine.patchmodel import Hunk

    data = FORMAT_PATCH + (
        b"--- a/g\n+++ b/g\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n c\n-d\n\\ No newline at end of file\n"
        b"+D\n\\ No newline at end of file\n--- a/h\n+++ b/h\n@@ -2,2 +2,3 @@\n x\n+y\n z\n"
        b"--- a/k\n+++ b/k\n@@ -1,2 +1,1 @@\n-gone\n-also gone\n+long replacement line\n"
        b"--- a/m\n+++ b/m\n@@ -1,2 +1,3 @@\n a\n b\n+c\n"
        b"--- a/n\n+++ b/n\n@@ -1,6 +1,6 @@\n a\n-b\n+B\n+B2\n c\n-d\n-d2\n+D\n e\n"
    )
    forward = [h for f in parse_patch(data, name="p").files for h in f.hunks]
    hunks = [h.reversed() for h in forward]
    assert len(hunks) == 8
    swap = {REMOVED: ADDED, ADDED: REMOVED, CONTEXT: CONTEXT}
    for hunk, before in zip(hunks, forward, strict=True):
        # the lines as the general rule orders them: kinds swapped, removed first in each run
        assert hunk.lines == _reorder_reversed(tuple((swap[k], t) for k, t in before.lines))
        assert hunk.reversed() == before
        built = Hunk(
            hunk.number,
            hunk.old_start,
            hunk.old_len,
            hunk.new_start,
            hunk.new_len,
            hunk.lines,
            hunk.patch_line,
        )
        assert built == hunk
        for attr in ("old_lines", "new_lines", "prefix_context", "suffix_context", "anchor"):
            assert getattr(built, attr) == getattr(hunk, attr), attr
