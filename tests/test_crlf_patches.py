"""Patch files saved with CRLF endings are read as GNU patch 2.7.6 reads them, GNU as the oracle.

The incident (issue 38, item 8): a patch file of a real series saved with CRLF endings applies with
GNU patch ("Stripping trailing CRs from patch"); we printed 14 whitespace findings and "does not apply
at fuzz 0 (GNU patch: FAILED at 548)", which was false, and never said CRLF.

Measured on the binary (2.7.6): the ``+++`` line of a file decides. When it ends in CR LF, GNU strips
the trailing CR of every line of that file's hunks (whatever their own endings) and prints
"(Stripping trailing CRs from patch; use --binary to disable.)" before "patching file"; the ``---``,
``diff --git`` and ``index`` lines do not count, and each file of the patch decides again. A stripped
patch then applies to the LF file and fails on a CRLF one with "FAILED at L (different line
endings)"; an LF ``+++`` keeps every CR in the hunks, matched byte for byte.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from test_differential_gnu import Case, engine_vs_gnu, run_gnu

from hyperqwen_patches.engine.patchscan import parse_patch

LF_F = b"".join(b"line %d\n" % i for i in range(1, 13))
LF_G = b"x\ny\nz\n"
F = [
    b"--- a/f.txt",
    b"+++ b/f.txt",
    b"@@ -2,5 +2,5 @@",
    b" line 2",
    b" line 3",
    b"-line 4",
    b"+line four",
    b" line 5",
    b" line 6",
    b"@@ -9,4 +9,5 @@",
    b" line 9",
    b" line 10",
    b"+line 10.5",
    b" line 11",
    b" line 12",
]
G = [b"diff --git a/g.txt b/g.txt", b"index 1111111..2222222 100644"]
G += [b"--- a/g.txt", b"+++ b/g.txt", b"@@ -1,3 +1,3 @@", b" x", b"-y", b"+Y", b" z"]


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


def with_endings(lines: list[bytes], ends_crlf: list[bool]) -> bytes:
    return b"".join(
        line + (b"\r\n" if cr else b"\n") for line, cr in zip(lines, ends_crlf, strict=True)
    )


def pattern(lines: list[bytes], which: str) -> list[bool]:
    """Which lines end in CR LF: every line, none, the headers, one header, the hunks, every other."""
    plus = next(i for i, line in enumerate(lines) if line.startswith(b"+++ "))
    rules = {
        "all": lambda i: True,
        "none": lambda i: False,
        "headers": lambda i: i <= plus,
        "plus-only": lambda i: i == plus,
        "minus-only": lambda i: i == plus - 1,
        "hunks-only": lambda i: i > plus,
        "alternate": lambda i: i % 2 == 1,
        "all-but-plus": lambda i: i != plus,
    }
    return [rules[which](i) for i in range(len(lines))]


PATTERNS = [
    "all",
    "none",
    "headers",
    "plus-only",
    "minus-only",
    "hunks-only",
    "alternate",
    "all-but-plus",
]


def stripped_by_gnu(output: str) -> set[bytes]:
    """The files GNU announced "Stripping trailing CRs" for (the line comes before its "patching")."""
    lines = output.splitlines()
    return {
        lines[i + 1].removeprefix("patching file ").encode()
        for i, line in enumerate(lines[:-1])
        if line.startswith("(Stripping trailing CRs from patch")
    }


@pytest.mark.parametrize(
    ("f_pattern", "g_pattern"),
    [(p, q) for p, q in itertools.product(PATTERNS, repeat=2) if p <= q or q == "none"],
)
@pytest.mark.parametrize("targets", ["lf", "crlf", "f-crlf"])
def test_crlf_in_a_patch_is_read_as_gnu_patch_reads_it(
    f_pattern: str, g_pattern: str, targets: str
) -> None:
    patch = with_endings(F, pattern(F, f_pattern)) + with_endings(G, pattern(G, g_pattern))
    tree = {
        "lf": {b"f.txt": LF_F, b"g.txt": LF_G},
        "crlf": {b"f.txt": crlf(LF_F), b"g.txt": crlf(LF_G)},
        "f-crlf": {b"f.txt": crlf(LF_F), b"g.txt": LF_G},
    }[targets]
    engine_vs_gnu(Case(tree, patch))  # every hunk's message and every byte of the tree
    parsed = parse_patch(patch, name="the.patch")
    gnu = run_gnu(tree, patch)
    assert {fp.path for fp in parsed.files if fp.crlf_stripped} == stripped_by_gnu(gnu.output)


def test_a_stripped_file_keeps_its_no_newline_marker_as_gnu_does() -> None:
    patch = crlf(
        b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+B\n\\ No newline at end of file\n"
    )
    engine_vs_gnu(Case({b"f": b"a\nb"}, patch))
    assert parse_patch(patch, name="p").files[0].crlf_stripped


def hqp(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_apply_says_crlf_once_per_file_and_writes_gnu_patchs_tree(tmp_path: Path) -> None:
    patch = tmp_path / "saved-on-windows.patch"
    patch.write_bytes(crlf(b"\n".join(F) + b"\n") + crlf(b"\n".join(G) + b"\n"))
    site = tmp_path / "site"
    site.mkdir()
    (site / "f.txt").write_bytes(LF_F)
    (site / "g.txt").write_bytes(LF_G)
    proc = hqp("apply", site, "--patch", patch, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "CRLF" in line]
    assert notes == [
        f"note: {patch}:1: f.txt: its lines end in CRLF; read as GNU patch 2.7.6 reads them "
        '(the CR of every line of its hunks stripped: "Stripping trailing CRs from patch")',
        f"note: {patch}:16: g.txt: its lines end in CRLF; read as GNU patch 2.7.6 reads them "
        '(the CR of every line of its hunks stripped: "Stripping trailing CRs from patch")',
    ]
    assert "FAILED" not in proc.stdout + proc.stderr
    gnu = run_gnu({b"f.txt": LF_F, b"g.txt": LF_G}, patch.read_bytes())
    assert {
        b"f.txt": (site / "f.txt").read_bytes(),
        b"g.txt": (site / "g.txt").read_bytes(),
    } == gnu.tree


def test_check_notes_the_crlf_file_once_with_no_failure_and_no_whitespace_finding(
    tmp_path: Path,
) -> None:
    """The incident's shape: a row's patch file saved with CRLF endings, its target an LF file."""
    from test_check import make_repo

    root, _ = make_repo(tmp_path)
    row = root / "patches/0001-envs-knob.patch"
    row.write_bytes(crlf(row.read_bytes()))
    proc = hqp("check", "--json", cwd=root)
    import json

    findings = json.loads(proc.stdout)["findings"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    crlf_findings = [f for f in findings if "CRLF" in f["message"]]
    assert [(f["check"], f["severity"], f["subject"]) for f in crlf_findings] == [
        ("apply", "note", "row envs-knob: vllm/envs.py")
    ]
    assert crlf_findings[0]["message"].startswith("patches/0001-envs-knob.patch:5: its lines end")
    assert not [f for f in findings if f["check"] == "whitespace"]
