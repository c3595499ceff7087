"""Differential tests: the engine against the real GNU patch 2.7.6 (``patch -p1 --fuzz 0 --forward``).

Hypothesis builds a file, an edited copy, the unified diff between them (made by GNU diffutils, not by
us, with 0-3 context lines), and then a *target* tree that drifted from the original: lines inserted
above and between hunks (offsets), decoy copies of a hunk's context placed nearer or farther than the
real place, changed lines (failures), the patch already applied (reversed detection), missing final
newlines and CRLF endings. GNU patch runs on the target in a temporary directory; the engine runs on the
same bytes in memory. They must agree file by file on success or failure, on every ``Hunk #N succeeded
at L (offset K lines).`` and ``Hunk #N FAILED at L.`` line, and on the resulting bytes.

The one deliberate difference (an "already applied" file must reverse-apply in full, where GNU patch
looks at its first hunk only) is checked separately in ``tests/test_engine_policies.py``.

Example counts are kept small enough that the suite runs well under two minutes on two cores; set
``HQP_DIFF_EXAMPLES`` to explore more (e.g. 2000) on a workstation.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import require_gnu_patch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hyperqwen_patches.engine import (
    Patch,
    PatchParseError,
    Policy,
    apply_series,
    parse_patch,
    verify_applied,
)

EXAMPLES = int(os.environ.get("HQP_DIFF_EXAMPLES", "120"))
settings.register_profile(
    "differential",
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI failures reproduce
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DIFF = settings.get_profile("differential")

GNU_ENV = {**os.environ, "LC_ALL": "C", "POSIXLY_CORRECT": ""}
GNU_ENV.pop("POSIXLY_CORRECT")
GNU_ENV.pop("PATCH_GET", None)
GNU_ENV.pop("PATCH_VERSION_CONTROL", None)
GNU_ENV.pop("VERSION_CONTROL", None)
GNU_ENV.pop("SIMPLE_BACKUP_SUFFIX", None)

_HUNK_MSG = re.compile(
    r"^Hunk #\d+ (succeeded at \d+( \(offset -?\d+ lines?\))?|FAILED at \d+( \(different line endings\))?)\.$"
)


@dataclass
class GnuFile:
    """What GNU patch said about one file of the patch."""

    path: str
    messages: list[str] = field(default_factory=list)
    verdict: str = "applied"  # applied | failed | reversed | exists | not-deleting | missing


@dataclass
class GnuRun:
    rc: int
    output: str
    files: dict[str, GnuFile]
    tree: dict[bytes, bytes]


def snapshot(root: Path) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.endswith((".orig", ".rej")):
            out[os.fsencode(path.relative_to(root))] = path.read_bytes()
    return out


def write_tree(root: Path, files: dict[bytes, bytes]) -> None:
    for rel, content in files.items():
        target = root / os.fsdecode(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def run_gnu(files: dict[bytes, bytes], patch: bytes) -> GnuRun:
    """Run ``patch -p1 --fuzz 0 --forward`` on a temporary copy of ``files``; parse what it prints."""
    binary = require_gnu_patch()
    with tempfile.TemporaryDirectory(prefix="hqp-gnu-") as tmp:
        root = Path(tmp) / "tree"
        root.mkdir()
        write_tree(root, files)
        patch_file = Path(tmp) / "the.patch"
        patch_file.write_bytes(patch)
        proc = subprocess.run(
            [binary, "-p1", "--fuzz", "0", "--forward", "-i", str(patch_file)],
            cwd=root,
            env=GNU_ENV,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        output = proc.stdout.decode("latin-1") + proc.stderr.decode("latin-1")
        return GnuRun(proc.returncode, output, _parse_gnu(output), snapshot(root))


def _parse_gnu(output: str) -> dict[str, GnuFile]:
    files: dict[str, GnuFile] = {}
    current: GnuFile | None = None
    lines = output.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(("patching file ", "checking file ")):
            name = line.split(" ", 2)[2].split(" (renamed from ")[0].strip("'")
            current = files.setdefault(name, GnuFile(name))
        elif line.startswith("The next patch would "):
            # "The next patch would create the file g,\nwhich already exists!  Skipping patch."
            m = re.match(r"The next patch would (create|delete|empty out) the file (.*),$", line)
            assert m, line
            current = files.setdefault(m[2], GnuFile(m[2]))
            current.verdict = {"create": "exists", "delete": "missing", "empty out": "empty"}[m[1]]
        elif line.startswith("Reversed (or previously applied) patch detected!"):
            assert current is not None
            current.verdict = "reversed"
        elif line.startswith("Not deleting file "):
            assert current is not None
            current.verdict = "not-deleting"
        elif line.startswith("can't find file to patch"):
            current = None
        elif _HUNK_MSG.match(line):
            assert current is not None, output
            current.messages.append(line)
            if "FAILED" in line:
                current.verdict = "failed"
        i += 1
    return files


@dataclass
class Case:
    """A tree to patch and a patch (made by GNU diff)."""

    tree: dict[bytes, bytes]
    patch: bytes
    # A hand-made hunk whose new side GNU does not write as it reads (a marker on a line that is
    # then followed by more) cannot be found again by unapplying it: skip --check-applied on it.
    reversible: bool = True


def engine_vs_gnu(case: Case) -> None:
    """The oracle check shared by every differential test."""
    gnu = run_gnu(case.tree, case.patch)
    patch = parse_patch(case.patch, name="the.patch")
    context = f"\n--- patch ---\n{case.patch.decode('latin-1')}\n--- GNU ---\n{gnu.output}"
    any_failed = False
    # GNU patch treats each file on its own; our unit of all-or-nothing is the patch, so compare file
    # by file (the generated patches never touch one path twice).
    for file_patch in patch.files:
        result = apply_series([Patch("the.patch", (file_patch,))], lambda p: case.tree.get(p))
        (file,) = result.patches[0].files
        name = file.path.decode()
        ours = [m for m in (h.gnu_message() for h in file.hunks) if m is not None]
        theirs = gnu.files.get(name, GnuFile(name, verdict="skipped"))
        if file.status == "already-applied":
            # Ours requires every hunk to reverse-apply; GNU looks at hunk 1 (or that a created file
            # exists, or a deleted one is missing): whenever we say already-applied, GNU skipped too.
            assert theirs.verdict in ("reversed", "exists", "missing", "empty"), context
            any_failed = True
            continue
        if file.status == "failed":
            any_failed = True
            if theirs.verdict == "reversed":
                # GNU: hunk 1 reverse-applies; ours: not every hunk does (partly applied).
                continue
            assert theirs.verdict in ("failed", "exists", "not-deleting", "missing"), (
                f"engine failed {name} ({file.error}) but GNU applied it{context}"
            )
            if theirs.verdict == "failed":
                assert ours == theirs.messages, context
            continue
        assert theirs.verdict == "applied", f"engine applied {name}, GNU: {theirs.verdict}{context}"
        assert ours == theirs.messages, context
        expected = gnu.tree.get(file.path)
        assert result.changes.get(file.path) == expected, f"bytes differ for {name}{context}"
        if file.action in ("rename", "delete"):
            assert file.old_path is not None and file.old_path not in gnu.tree, context
    assert (gnu.rc == 0) == (not any_failed), context
    if gnu.rc == 0 and case.reversible and not _overlapping(patch):
        # ``apply --check-applied`` on what GNU patch produced: the patch must be found present.
        # (Hand-made hunks whose context overlaps a neighbour's change cannot be undone one by one.)
        (presence,) = verify_applied([patch], lambda p: gnu.tree.get(p))
        assert presence.status == "present", f"not found in GNU's result: {presence}{context}"


def _overlapping(patch: Patch) -> bool:
    return any(
        later.old_start <= earlier.old_start + earlier.old_len - 1
        for file in patch.files
        for earlier, later in zip(file.hunks, file.hunks[1:], strict=False)
    )


# --- strategies ---------------------------------------------------------------------------------

# A small alphabet makes repeated lines (and so decoy matches) common, as in real code: blank lines,
# "pass", "return None".
WORDS = [b"a", b"b", b"c", b"", b"pass", b"return"]


@st.composite
def lines_strategy(draw: st.DrawFn, *, min_size: int = 0, max_size: int = 30) -> list[bytes]:
    crlf = draw(st.sampled_from(["never", "never", "always", "mixed"]))
    count = draw(st.integers(min_size, max_size))
    out: list[bytes] = []
    for i in range(count):
        word = draw(st.sampled_from([*WORDS, b"u%d" % i, b"u%d" % i]))
        ending = b"\r\n" if crlf == "always" or (crlf == "mixed" and draw(st.booleans())) else b"\n"
        out.append(word + ending)
    if out and draw(st.integers(0, 4)) == 0:
        # No newline at end of file; a CRLF line may keep its CR as the file's last byte.
        out[-1] = out[-1][:-1] if draw(st.booleans()) else out[-1].rstrip(b"\r\n")
    return out


@st.composite
def edited(draw: st.DrawFn, original: list[bytes]) -> list[bytes]:
    """Apply 1-3 random edits (replace, insert, delete) to a copy of ``original``."""
    new = list(original)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["replace", "insert", "delete"]))
        pos = draw(st.integers(0, len(new)))
        fresh = [b"new%d\n" % draw(st.integers(0, 99)) for _ in range(draw(st.integers(1, 3)))]
        if kind == "insert" or not new:
            new[pos:pos] = fresh
        elif kind == "replace":
            pos = min(pos, len(new) - 1)
            new[pos : pos + 1] = fresh
        else:
            pos = min(pos, len(new) - 1)
            del new[pos : pos + draw(st.integers(1, 2))]
    # A final line without newline that gained a successor needs one (as an editor would add).
    for i in range(len(new) - 1):
        if not new[i].endswith(b"\n"):
            new[i] += b"\n"
    return new


@st.composite
def drifted(draw: st.DrawFn, original: list[bytes], new: list[bytes]) -> list[bytes]:
    """The target tree's version of the file: the original with upstream drift, or the patch applied."""
    mode = draw(st.sampled_from(["same", "drift", "drift", "drift", "applied", "changed"]))
    if mode == "same":
        return list(original)
    if mode == "applied":
        return list(new)
    target = list(original)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["shift", "decoy", "decoy", "drop"]))
        pos = draw(st.integers(0, len(target)))
        if kind == "shift":
            target[pos:pos] = [b"up%d\n" % draw(st.integers(0, 9))] * draw(st.integers(1, 5))
        elif kind == "decoy" and original:
            start = draw(st.integers(0, len(original) - 1))
            length = draw(st.integers(1, 8))
            chunk = [
                line if line.endswith(b"\n") else line + b"\n"
                for line in original[start : start + length]
            ]
            target[pos:pos] = chunk
        elif kind == "drop" and target:
            del target[min(pos, len(target) - 1)]
    if mode == "changed" and target:
        pos = draw(st.integers(0, len(target) - 1))
        target[pos] = b"changed\n"
    for i in range(len(target) - 1):
        if not target[i].endswith(b"\n"):
            target[i] += b"\n"
    return target


def make_diff(old: bytes | None, new: bytes | None, path: str, context: int) -> bytes:
    """A unified diff made by GNU diffutils (``diff -U<context>``), /dev/null for a missing side."""
    with tempfile.TemporaryDirectory(prefix="hqp-diff-") as tmp:
        a = Path(tmp) / "a"
        b = Path(tmp) / "b"
        a.write_bytes(old or b"")
        b.write_bytes(new or b"")
        proc = subprocess.run(
            [
                "diff",
                f"-U{context}",
                "--label",
                "/dev/null" if old is None else f"a/{path}",
                "--label",
                "/dev/null" if new is None else f"b/{path}",
                str(a),
                str(b),
            ],
            capture_output=True,
            check=False,
            env=GNU_ENV,
        )
        assert proc.returncode in (0, 1), proc.stderr
        return proc.stdout


_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@st.composite
def trimmed(draw: st.DrawFn, patch: bytes) -> bytes:
    """Hand-edited hunks: drop some leading or trailing context lines (headers adjusted), so hunks
    with unequal context appear in the middle of files too, not only at their edges."""
    lines = patch.splitlines(keepends=True)
    out: list[bytes] = []
    i = 0
    while i < len(lines):
        match = _HEADER.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        a, b = int(match[1]), int(match[2] or 1)
        c, d = int(match[3]), int(match[4] or 1)
        body: list[bytes] = []
        j = i + 1
        while j < len(lines) and not lines[j].startswith(b"@@"):
            body.append(lines[j])
            j += 1
        kinds = [line[:1] for line in body]
        changes = {k for k in kinds if k in (b"-", b"+")}
        if changes == {b"-", b"+"} and b"\\" not in kinds and draw(st.booleans()):
            lead = next(n for n, k in enumerate(kinds) if k != b" ")
            trail = next(n for n, k in enumerate(reversed(kinds)) if k != b" ")
            if draw(st.booleans()) and lead:
                k = draw(st.integers(1, lead))
                body = body[k:]
                a, b, c, d = a + k, b - k, c + k, d - k
            elif trail:
                k = draw(st.integers(1, trail))
                body = body[: len(body) - k]
                b, d = b - k, d - k
        out.append(b"@@ -%d,%d +%d,%d @@\n" % (a, b, c, d))
        out.extend(body)
        i = j
    return b"".join(out)


@st.composite
def modify_case(draw: st.DrawFn) -> Case:
    original = draw(lines_strategy(min_size=1))
    new = draw(edited(original))
    context = draw(st.sampled_from([3, 3, 2, 1, 0]))
    patch = make_diff(b"".join(original), b"".join(new), "f.py", context)
    if not patch:
        patch = make_diff(b"".join(original), b"".join([*new, b"extra\n"]), "f.py", context)
    if draw(st.integers(0, 3)) == 0:
        patch = draw(trimmed(patch))
    target = draw(drifted(original, new))
    return Case({b"f.py": b"".join(target)}, patch)


@settings(parent=DIFF)
@given(modify_case())
def test_modify_agrees_with_gnu_patch(case: Case) -> None:
    engine_vs_gnu(case)


@st.composite
def multi_file_case(draw: st.DrawFn) -> Case:
    """Several files in one patch: modifications, a creation and a deletion, each with its own drift."""
    tree: dict[bytes, bytes] = {}
    parts: list[bytes] = []
    for index in range(draw(st.integers(1, 3))):
        path = f"pkg/m{index}.py"
        original = draw(lines_strategy(min_size=1, max_size=20))
        new = draw(edited(original))
        context = draw(st.sampled_from([3, 1]))
        diff = make_diff(b"".join(original), b"".join(new), path, context)
        if diff:
            parts.append(diff)
            tree[path.encode()] = b"".join(draw(drifted(original, new)))
    created = draw(lines_strategy(max_size=8))
    if created:
        parts.append(make_diff(None, b"".join(created), "pkg/new.py", 3))
        existing = draw(st.sampled_from(["absent", "absent", "same", "other"]))
        if existing == "same":
            tree[b"pkg/new.py"] = b"".join(created)
        elif existing == "other":
            tree[b"pkg/new.py"] = b"other\n"
    doomed = draw(lines_strategy(min_size=1, max_size=8))
    if draw(st.booleans()):
        parts.append(make_diff(b"".join(doomed), None, "pkg/old.py", 3))
        state = draw(st.sampled_from(["same", "same", "extra", "absent"]))
        if state == "same":
            tree[b"pkg/old.py"] = b"".join(doomed)
        elif state == "extra":
            tree[b"pkg/old.py"] = b"".join(doomed) + b"extra\n"
    if not parts:
        parts.append(make_diff(b"x\n", b"y\n", "pkg/x.py", 3))
        tree[b"pkg/x.py"] = b"x\n"
    return Case(tree, b"".join(parts))


@settings(parent=DIFF)
@given(multi_file_case())
def test_multi_file_patches_agree_with_gnu_patch(case: Case) -> None:
    engine_vs_gnu(case)


# --- fixed cases: the corners the spec names, each one against the binary ----------------------------


def numbered(count: int, start: int = 1) -> bytes:
    return b"".join(b"%d\n" % i for i in range(start, start + count))


FIXED = {
    "offset-carried-forward": Case(
        {b"f": b"top\n" * 5 + numbered(40)},
        b"--- a/f\n+++ b/f\n@@ -9,3 +9,3 @@\n 9\n-10\n+ten\n 11\n@@ -29,3 +29,3 @@\n 29\n-30\n+thirty\n 31\n",
    ),
    "decoy-nearer-than-the-real-place": Case(
        {b"f": numbered(20) + b"x\ny\nz\n" + numbered(20, 100)},
        b"--- a/f\n+++ b/f\n@@ -24,3 +24,3 @@\n x\n-y\n+Y\n z\n",
    ),
    "first-line-anchored": Case(
        {b"f": b"new top\n" + numbered(10)},
        b"--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n-1\n+one\n 2\n 3\n 4\n",
    ),
    "last-line-anchored": Case(
        {b"f": numbered(12)},
        b"--- a/f\n+++ b/f\n@@ -7,4 +7,4 @@\n 7\n 8\n 9\n-10\n+ten\n",
    ),
    "one-line-offset-is-singular": Case(
        {b"f": b"up\n" + numbered(10)},
        b"--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n 4\n-5\n+five\n 6\n",
    ),
    "negative-offset": Case(
        {b"f": numbered(10, 3)},
        b"--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n 6\n-7\n+seven\n 8\n",
    ),
    "overlapping-context-after-earlier-hunk": Case(
        {b"f": numbered(20)},
        b"--- a/f\n+++ b/f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        b"@@ -3,7 +3,7 @@\n 3\n 4\n 5\n-6\n+six\n 7\n 8\n 9\n",
    ),
    "no-newline-at-end": Case(
        {b"f": b"a\nb\nc"},
        b"--- a/f\n+++ b/f\n@@ -2,2 +2,2 @@\n b\n-c\n\\ No newline at end of file\n+C\n\\ No newline at end of file\n",
    ),
    "cr-without-lf-at-end-of-file": Case(
        {b"f": b"a\nb\r"},
        b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\r\n\\ No newline at end of file\n+B\r\n\\ No newline at end of file\n",
    ),
    "crlf-kept": Case(
        {b"f": b"a\r\nb\r\nc\r\n"},
        b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\r\n-b\r\n+B\r\n c\r\n",
    ),
    "latin-1-bytes-pass-through": Case(
        {b"f": b"caf\xe9\nna\xefve\n\xff\xfe\n"},
        b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n caf\xe9\n-na\xefve\n+NA\xcfVE\n \xff\xfe\n",
    ),
    "failed-hunk-and-later-hunks": Case(
        {b"f": numbered(40)},
        b"--- a/f\n+++ b/f\n@@ -5,3 +5,3 @@\n 5\n-X\n+six\n 7\n@@ -20,3 +20,3 @@\n 20\n-21\n+tw1\n 22\n",
    ),
    "already-applied": Case(
        {b"f": b"1\n2\nthree\n4\n5\n"},
        b"--- a/f\n+++ b/f\n@@ -2,3 +2,3 @@\n 2\n-3\n+three\n 4\n",
    ),
    "create-existing-different": Case(
        {b"g": b"something\n"}, b"--- /dev/null\n+++ b/g\n@@ -0,0 +1,2 @@\n+1\n+2\n"
    ),
    "create-into-empty-file": Case(
        {b"g": b""}, b"--- /dev/null\n+++ b/g\n@@ -0,0 +1,2 @@\n+1\n+2\n"
    ),
    "delete-with-extra-content": Case(
        {b"g": b"1\n2\n3\n"}, b"--- a/g\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-1\n-2\n"
    ),
    "git-rename-with-a-hunk-and-a-mode-change": Case(
        {b"old.py": numbered(10), b"run.sh": b"#!/bin/sh\n"},
        b"diff --git a/old.py b/new.py\nsimilarity index 90%\nrename from old.py\nrename to new.py\n"
        b"index 1111111..2222222 100644\n--- a/old.py\n+++ b/new.py\n@@ -4,3 +4,3 @@\n 4\n-5\n+five\n 6\n"
        b"diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n",
    ),
    "unequal-context-in-the-middle-searches-normally": Case(
        {b"f": b"up\n" * 2 + numbered(20)},
        b"--- a/f\n+++ b/f\n@@ -6,5 +6,5 @@\n 6\n-7\n+seven\n 8\n 9\n 10\n",
    ),
    "misordered-placement-fails": Case(
        {b"f": numbered(20)},
        b"--- a/f\n+++ b/f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        b"@@ -3,3 +3,3 @@\n 3\n-4\n+four\n 5\n",
    ),
    "insertion-after-a-last-line-without-newline": Case(
        # The marker on the last old line, more new lines after it: GNU ends that line (the engine
        # glued "b" and "c" into one line before).
        {b"f": b"a\nb"},
        b"--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n a\n b\n\\ No newline at end of file\n+c\n",
        reversible=False,
    ),
    "insertion-after-a-last-line-without-newline-one-line-hunk": Case(
        {b"f": b"a\nb"},
        b"--- a/f\n+++ b/f\n@@ -2,1 +2,2 @@\n b\n\\ No newline at end of file\n+c\n",
        reversible=False,
    ),
    "a-second-marker-after-the-hunk-is-ignored": Case(
        {b"f": b"a\nb"},
        b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
        b"\\ No newline at end of file\n\\ No newline at end of file\n",
    ),
    # GNU's tie-break: copies of the preimage 2 lines above and 2 below the first guess; its probe
    # order (offsets 0, +1, -1, +2, -2, ...) takes the later one.
    "tie-between-equally-near-copies-takes-the-later": Case(
        {b"f": b"u\n" + b"x\ny\nz\nv\n" + b"x\ny\nz\nw\n"},
        b"--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n x\n-y\n+Y\n z\n",
    ),
    "tie-after-an-offset-hunk-uses-the-running-offset": Case(
        {b"f": b"a\nb\nc\nd\n" + numbered(6) + b"x\ny\nz\nq\nr\nx\ny\nz\n"},
        b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n@@ -11,3 +11,3 @@\n x\n-y\n+Y\n z\n",
    ),
    # "FAILED at L" counts the lines earlier hunks added (out_offset), not where they landed.
    "failed-at-after-an-offset-hunk-that-added-lines": Case(
        {b"f": b"up\nup\nup\n" + numbered(30)},
        b"--- a/f\n+++ b/f\n@@ -2,3 +2,5 @@\n 2\n-3\n+three\n+and\n+more\n 4\n"
        b"@@ -20,3 +22,3 @@\n 20\n-not there\n+X\n 22\n",
    ),
    "failed-at-after-a-negative-offset-hunk-that-removed-lines": Case(
        {b"f": numbered(30, 3)},
        b"--- a/f\n+++ b/f\n@@ -5,4 +5,2 @@\n 7\n-8\n-9\n 10\n"
        b"@@ -20,3 +18,3 @@\n 20\n-not there\n+X\n 22\n",
    ),
    "zero-context-insertion": Case(
        {b"f": b"up\n" + numbered(10)},
        b"--- a/f\n+++ b/f\n@@ -3,0 +4,2 @@\n+x\n+y\n@@ -7 +9 @@\n-7\n+seven\n",
    ),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_corner_cases_agree_with_gnu_patch(name: str) -> None:
    engine_vs_gnu(FIXED[name])


def test_the_oracle_is_gnu_patch_2_7_6() -> None:
    """The differential suite is only as good as its oracle: make sure it is the one the spec names."""
    version = subprocess.run(
        [require_gnu_patch(), "--version"], capture_output=True, check=True, text=True
    ).stdout
    assert version.startswith("GNU patch 2.7.6"), version


def test_the_harness_sees_a_disagreement() -> None:
    """A harness that cannot fail proves nothing: feed it a policy GNU patch does not have."""
    case = FIXED["one-line-offset-is-singular"]
    patch = parse_patch(case.patch, name="p")
    strict = apply_series([patch], lambda p: case.tree.get(p), Policy(exact=True))
    assert not strict.ok
    gnu = run_gnu(case.tree, case.patch)
    assert gnu.rc == 0 and gnu.files["f"].messages == ["Hunk #1 succeeded at 5 (offset 1 line)."]


# Patches GNU patch 2.7.6 refuses as malformed (exit 2, nothing written); the engine used to accept each.
MALFORMED = {
    "marker-after-an-addition-that-is-not-last": (
        b"a\nb\n",
        b"--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n a\n+X\n\\ No newline at end of file\n b\n",
    ),
    "marker-twice-inside-the-hunk": (
        b"a\nb",
        b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n"
        b"\\ No newline at end of file\n+c\n",
    ),
    "bare-crlf-line-in-a-hunk": (
        b"a\n\r\nb\n",
        b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\r\n-b\n+c\n",
    ),
    "cut-off-inside-the-last-line": (b"a\nb\n", b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c"),
    "line-number-at-the-64-bit-limit": (
        b"b\n",
        b"--- a/f\n+++ b/f\n@@ -9223372036854775806,1 +1,1 @@\n-b\n+c\n",
    ),
    "line-number-past-64-bits": (
        b"b\n",
        b"--- a/f\n+++ b/f\n@@ -99999999999999999999,1 +1,1 @@\n-b\n+c\n",
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_patches_are_refused_as_gnu_patch_refuses_them(name: str) -> None:
    content, data = MALFORMED[name]
    gnu = run_gnu({b"f": content}, data)
    assert gnu.rc == 2 and gnu.tree == {b"f": content}, gnu.output
    with pytest.raises(PatchParseError) as caught:
        parse_patch(data, name="the.patch")
    assert caught.value.line is not None  # the error names the patch line


def test_a_huge_but_representable_line_number_still_applies_as_gnu_does() -> None:
    engine_vs_gnu(
        Case(
            {b"f": b"a\nb\n"},
            b"--- a/f\n+++ b/f\n@@ -1000000000000,2 +1000000000000,2 @@\n a\n-b\n+c\n",
        )
    )


def test_many_hunks_over_repeated_lines_agree_with_gnu_patch() -> None:
    """Past INDEXED_FROM hunks a file is searched through its line index (placement was quadratic:
    2,000 hunks over repeated lines took 52 s); GNU patch is the oracle for what that index finds."""
    blocks = [b"    pass\n" * 3 + b"x = %d\n" % i + b"    pass\n" * 3 for i in range(60)]
    content = b"".join(blocks)
    hunks = []
    for i in range(0, 60, 2):
        start = i * 7 + 1 + (2 if i % 4 else 0)  # every other hunk stated 2 lines off: offsets
        hunks.append(
            b"@@ -%d,7 +%d,7 @@\n" % (start, start)
            + b"     pass\n" * 3
            + b"-x = %d\n+x = %d0\n" % (i, i)
            + b"     pass\n" * 3
        )
    engine_vs_gnu(Case({b"f": content}, b"--- a/f\n+++ b/f\n" + b"".join(hunks)))


def repeated_workload(n: int, seed: int, *, shifted: bool = True) -> Case:
    """n hunks whose preimages are made of repeated lines only (every one matches in many places),
    one in three stated 1-2 lines off (ties between equally near copies are common) and a few that
    match nowhere: the shape that made placement quadratic, small enough to run against GNU."""
    rng = random.Random(seed)
    filler = [b"pass\n", b"pass\n", b"\n", b"return\n"]
    lines = [rng.choice(filler) for _ in range(n * 6)]
    hunks = []
    for i in range(n):
        start = i * 6 + 2
        pre = lines[start - 1 : start + 2]
        mid = b"gone\n" if i % 37 == 5 and shifted else pre[1]
        stated = start + (rng.choice((-2, -1, 1, 2)) if i % 3 == 1 and shifted else 0)
        hunks.append(
            b"@@ -%d,3 +%d,3 @@\n" % (stated, stated)
            + b" "
            + pre[0]
            + b"-"
            + mid
            + b"+new %d\n" % i
            + b" "
            + pre[2]
        )
    return Case({b"f": b"".join(lines)}, b"--- a/f\n+++ b/f\n" + b"".join(hunks))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_many_hunks_of_repeated_lines_with_ties_and_failures_agree_with_gnu_patch(
    seed: int,
) -> None:
    """Past INDEXED_FROM hunks and WINDOW_FROM candidates, preimages are found through the window
    table and every hunk picks its match by bisection: GNU is the oracle for the winner of each tie
    and for every "FAILED at" line."""
    engine_vs_gnu(repeated_workload(120, seed))
    # and every hunk at its stated line (each still matching in many places): GNU applies them all
    # and the bytes are compared too
    engine_vs_gnu(repeated_workload(120, seed, shifted=False))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from([b"a\n", b"b\n", b"    pass\n", b"\n", b"x\n"]), max_size=60),
    st.lists(st.sampled_from([b"a\n", b"b\n", b"    pass\n", b"\n"]), min_size=1, max_size=5),
    st.integers(-5, 70),
    st.integers(-5, 70),
)
def test_the_line_index_finds_what_the_scan_finds(
    lines: list[bytes], pattern: list[bytes], low: int, high: int
) -> None:
    from unittest import mock

    from hyperqwen_patches.engine import placement
    from hyperqwen_patches.engine.placement import FileLines

    scanned = FileLines(lines).matching_starts(tuple(pattern), low, high)
    indexed = FileLines(lines, indexed=True).matching_starts(tuple(pattern), low, high)
    assert indexed == scanned
    # The whole file's starts, memoised per preimage: through the rarest line and through the
    # table of windows (WINDOW_FROM forced down so these small files use it).
    for window_from in (placement.WINDOW_FROM, -1):
        with mock.patch.object(placement, "WINDOW_FROM", window_from):
            starts = FileLines(lines, indexed=True).starts(tuple(pattern))
        assert [w for w in starts if low <= w <= high] == scanned
