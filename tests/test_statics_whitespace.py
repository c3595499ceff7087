"""Whitespace: our rule against real ``git diff --check`` on the same changes (a differential test),
and the check on a series."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from test_statics_provenance import make_repo, static_findings

from hyperqwen_patches.engine.patchscan import parse_patch
from hyperqwen_patches.statics.whitespace import check_whitespace, patch_errors

WHITESPACE = check_whitespace

OLD = b"".join(b"line %d\n" % i for i in range(1, 13)) + b"\ttabbed\n"
CASES = {
    "clean": OLD.replace(b"line 3\n", b"line 3\nadded\n\tindented\n"),
    "trailing-space": OLD.replace(b"line 3\n", b"line 3\nadded \n"),
    "trailing-tab": OLD.replace(b"line 3\n", b"line 3\nadded\t\n"),
    "crlf": OLD.replace(b"line 3\n", b"line 3\nadded\r\n"),
    "space-before-tab": OLD.replace(b"line 3\n", b"line 3\n \tmixed\n"),
    "tab-then-space-is-fine": OLD.replace(b"line 3\n", b"line 3\n\t  fine\n"),
    "both": OLD.replace(b"line 3\n", b"line 3\n  \tx \n"),
    "blank-line-only": OLD.replace(b"line 3\n", b"line 3\n   \n"),
    "new-blank-at-eof": OLD + b"\n\n",
    "vt-ff-are-not-space": OLD.replace(b"line 3\n", b"line 3\nadded\x0b\nother\x0c\n"),
    "several": OLD.replace(b"line 2\n", b"line 2\nx \n").replace(b"line 11\n", b"line 11\n \ty\n"),
}


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_lines_as_git_diff_check(tmp_path: Path, case: str) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "f.py").write_bytes(OLD)
    git(tmp_path, "add", "f.py")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base")
    (tmp_path / "f.py").write_bytes(CASES[case])
    patch = git(tmp_path, "diff").stdout
    oracle = git(tmp_path, "diff", "--check").stdout.decode()
    expected = sorted(
        (int(m[1]), m[2]) for m in re.finditer(r"^f\.py:(\d+): (.*)\.$", oracle, re.MULTILINE)
    )
    ours = sorted(
        (e.line, ", ".join(e.errors)) for e in patch_errors(parse_patch(patch, name=case))
    )
    assert ours == expected, oracle
    if case == "clean":
        assert expected == []


def test_a_series_row_with_trailing_whitespace_is_named(tmp_path: Path) -> None:
    pristine = {"vllm/a.py": OLD}
    root = make_repo(
        tmp_path,
        pristine,
        [("clean", {"vllm/a.py": CASES["clean"]}), ("dirty", {"vllm/b.py": b"x = 1 \n"})],
    )
    [finding] = static_findings(root, WHITESPACE)
    assert (finding.subject, finding.message) == ("row dirty: vllm/b.py:1", "trailing whitespace.")


def test_lines_are_numbered_where_the_row_lands(tmp_path: Path) -> None:
    # The second row's hunk lands after the first row's two added lines: git numbers the new file.
    one = OLD.replace(b"line 1\n", b"line 1\na\nb\n")
    two = one.replace(b"line 9\n", b"line 9\nz \n")
    root = make_repo(
        tmp_path, {"vllm/a.py": OLD}, [("one", {"vllm/a.py": one}), ("two", {"vllm/a.py": two})]
    )
    [finding] = static_findings(root, WHITESPACE)
    assert finding.subject == "row two: vllm/a.py:12"


def test_a_module_file_is_checked_like_git_checks_a_new_file(tmp_path: Path) -> None:
    from hyperqwen_patches.engine.patchscan import patch_from_files

    content = b"ok\nbad \n \tmixed\nlast\n\n\n"
    git(tmp_path, "init", "-q")
    (tmp_path / "m.py").write_bytes(content)
    git(tmp_path, "add", "m.py")
    oracle = git(tmp_path, "diff", "--cached", "--check").stdout.decode()
    expected = sorted(
        (int(m[1]), m[2]) for m in re.finditer(r"^m\.py:(\d+): (.*)\.$", oracle, re.MULTILINE)
    )
    patch = patch_from_files("mod", {b"m.py": content})
    ours = sorted((e.line, ", ".join(e.errors)) for e in patch_errors(patch))
    assert ours == expected and len(expected) == 3, oracle
