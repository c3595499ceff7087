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
