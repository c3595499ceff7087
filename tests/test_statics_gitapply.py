"""The git apply contract: marked rows pass real ``git apply --check --whitespace=error`` in series
order; unmarked rows are not held to it."""

from __future__ import annotations

from pathlib import Path

from test_statics_provenance import make_repo, static_findings

from hyperqwen_patches.statics.gitapply import check_git_apply

GITAPPLY = check_git_apply
OLD = b"".join(b"line %d\n" % i for i in range(1, 10))
MARK = "    git_apply: true\n"


def test_a_marked_row_with_whitespace_errors_fails_git_apply(tmp_path: Path) -> None:
    dirty = OLD.replace(b"line 4\n", b"line 4\nadded \n")
    root = make_repo(
        tmp_path, {"vllm/a.py": OLD}, [("dirty", {"vllm/a.py": dirty})], row_extra={"dirty": MARK}
    )
    [finding] = static_findings(root, GITAPPLY)
    assert finding.subject == "row dirty"
    assert (
        "git apply --check --whitespace=error refuses patches/0001-dirty.patch" in finding.message
    )
    assert "trailing whitespace" in finding.detail


def test_unmarked_rows_are_not_held_to_it(tmp_path: Path) -> None:
    dirty = OLD.replace(b"line 4\n", b"line 4\nadded \n")
    root = make_repo(tmp_path, {"vllm/a.py": OLD}, [("dirty", {"vllm/a.py": dirty})])
    assert static_findings(root, GITAPPLY) == []
    # Nothing was asked of it, so it is not said to hold (issue #39: "held" with no row marked).
    from hyperqwen_patches.checks.pipeline import run_check

    report = run_check(root, pipeline=(GITAPPLY,))
    assert report.status("git-apply") == "not asked for"
    assert report.to_json()["status"] == {"git-apply": "not asked for"}


def test_a_marked_row_that_passes_is_held(tmp_path: Path) -> None:
    from hyperqwen_patches.checks.pipeline import run_check

    clean = OLD.replace(b"line 4\n", b"line 4\nadded\n")
    root = make_repo(
        tmp_path, {"vllm/a.py": OLD}, [("clean", {"vllm/a.py": clean})], row_extra={"clean": MARK}
    )
    assert run_check(root, pipeline=(GITAPPLY,)).status("git-apply") == "held"


def test_a_marked_row_is_checked_on_what_the_rows_before_it_made(tmp_path: Path) -> None:
    one = OLD.replace(b"line 2\n", b"line 2\nfrom one\n")
    two = one.replace(b"from one\n", b"from one\nfrom two\n")  # its context needs row one's line
    root = make_repo(
        tmp_path,
        {"vllm/a.py": OLD},
        [
            ("one", {"vllm/a.py": one}),
            ("two", {"vllm/a.py": two}),
            ("new", {"vllm/n.py": b"x = 1\n"}),
        ],
        row_extra={"two": MARK, "new": MARK},
    )
    assert static_findings(root, GITAPPLY) == []


def _crlf_row(tmp_path: Path, mark: str) -> Path:
    """A row whose patch file was saved with CRLF endings (the files it patches are LF)."""
    new = OLD.replace(b"line 4\n", b"line 4\nadded\n")
    root = make_repo(
        tmp_path, {"vllm/a.py": OLD}, [("crlf", {"vllm/a.py": new})], row_extra={"crlf": mark}
    )
    patch = root / "patches/0001-crlf.patch"
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\r\n"))
    return root


def test_a_crlf_patch_fails_plain_git_apply_but_passes_with_the_series_flags(
    tmp_path: Path,
) -> None:
    """#38: the series' own script runs `git apply --check --ignore-whitespace`; stated on the row
    (`git_apply: [--ignore-whitespace]`), the check asks real git the same and holds."""
    [finding] = static_findings(_crlf_row(tmp_path / "plain", MARK), GITAPPLY)
    assert "git apply --check --whitespace=error refuses" in finding.message
    flagged = _crlf_row(tmp_path / "flags", "    git_apply: [--ignore-whitespace]\n")
    assert static_findings(flagged, GITAPPLY) == []


def test_a_rows_whitespace_flag_replaces_the_default(tmp_path: Path) -> None:
    dirty = OLD.replace(b"line 4\n", b"line 4\nadded \n")
    row = {"dirty": "    git_apply: [--whitespace=nowarn]\n"}
    root = make_repo(tmp_path, {"vllm/a.py": OLD}, [("dirty", {"vllm/a.py": dirty})], row_extra=row)
    assert static_findings(root, GITAPPLY) == []
    # The flags are part of what a cached verdict is about: back to the default, it fails again.
    manifest = root / "patches/manifest.yaml"
    manifest.write_text(manifest.read_text().replace("[--whitespace=nowarn]", "true"))
    [finding] = static_findings(root, GITAPPLY)
    assert "--whitespace=error refuses" in finding.message
