"""The batched git reads (one process per export point) give exactly what the per-commit calls give.

``check`` on a 1,000-row series spent most of its time starting git processes (one ``cat-file``, one
``diff-tree``, one ``diff-tree --numstat`` and one ``format-patch`` per commit, and one ``ls-tree -r`` of
the whole tree per replay step; docs/performance.md). The batched forms replace them; each is compared
here with the per-commit form it replaces, on the hostile fixture fork (a mode change, a rename, CRLF,
Latin-1, a dropped final newline, a binary file) and under a hostile git configuration.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_git import (
    BRANCH,
    FORK_COMMITS,
    PRISTINE,
    DictTree,
    FixtureCommit,
    make_fork,
    make_hostile,
    sh,
)

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import GitError
from hyperqwen_patches.fork import batchformat, binarypaths, forkwalk, formatpatch, treestate
from hyperqwen_patches.fork import reading as forkgit


def _fork(tmp_path: Path) -> tuple[Path, str, str]:
    # The fixture's commits plus one that adds a binary file and one that deletes a file.
    extra = (
        *FORK_COMMITS,
        FixtureCommit("blob", "add a binary file", {b"vllm/data.bin": b"\x00\x01\x02binary\x00"}),
        FixtureCommit("drop", "drop the shell script", {b"vllm/tools/run.sh": None}),
    )
    repo = tmp_path / "fork"
    base, shas = make_fork(repo, extra)
    return gitrun.git_dir_of(repo), base, shas[-1]


def test_list_commits_changes_equal_diff_tree_per_commit(tmp_path: Path) -> None:
    git_dir, base, tip = _fork(tmp_path)
    commits = forkgit.list_commits(git_dir, base, tip)
    assert len(commits) == len(FORK_COMMITS) + 2
    statuses = {c.status for commit in commits for c in commit.changes}
    assert {"A", "M", "D", "R"} <= statuses  # the fixture exercises every record form
    for commit in commits:
        assert forkgit.read_commit(git_dir, commit.sha) == (
            commit.tree,
            commit.parents,
            commit.message,
        )
        assert commit.changes == forkgit.diff_tree(git_dir, commit.parents[0], commit.sha)
    # The second call is the memo's: same content, a new list the caller may change.
    again = forkgit.list_commits(git_dir, base, tip)
    assert again == commits and again is not commits


def test_binary_paths_of_equals_binary_paths_per_commit(tmp_path: Path) -> None:
    git_dir, base, tip = _fork(tmp_path)
    commits = forkgit.list_commits(git_dir, base, tip)
    batched = binarypaths.binary_paths_of(git_dir, commits)
    assert batched == {c.sha: binarypaths.binary_paths(git_dir, c) for c in commits}
    assert [b"vllm/data.bin"] in batched.values()  # the test can fail: a binary change is found


def test_format_commits_equals_format_commit_per_commit(tmp_path: Path, isolated_env: Path) -> None:
    git_dir, base, tip = _fork(tmp_path)
    commits = forkgit.list_commits(git_dir, base, tip)
    expected = {c.sha: formatpatch.format_commit(git_dir, c.sha) for c in commits}
    assert batchformat.format_commits(git_dir, commits) == expected
    # Under a hostile global and repository configuration and hostile attributes: in the scratch view
    # export uses, the batch gives the clean bytes; on the hostile fork itself (where the attributes
    # do leak) it still gives what the per-commit call gives, leak for leak.
    make_hostile(tmp_path / "fork", isolated_env)
    with forkgit.scratch_repo(borrow=git_dir) as view:
        assert batchformat.format_commits(view, commits) == expected
    hostile = {c.sha: formatpatch.format_commit(git_dir, c.sha) for c in commits}
    assert hostile != expected
    assert batchformat.format_commits(git_dir, commits) == hostile
    # A subset that is not a chain falls back to one call each, with the same bytes.
    picked = [commits[0], commits[2]]
    assert batchformat.format_commits(git_dir, picked) == {c.sha: expected[c.sha] for c in picked}


def test_read_objects_refuses_the_wrong_kind(tmp_path: Path) -> None:
    git_dir, base, tip = _fork(tmp_path)
    commits = forkgit.list_commits(git_dir, base, tip)
    blobs = [c.new_sha for commit in commits for c in commit.changes if c.new_path is not None]
    read = forkgit.read_objects(git_dir, blobs, kind="blob")
    assert read == {sha: forkgit.read_blob(git_dir, sha) for sha in blobs}
    with pytest.raises(GitError, match="not a blob"):
        forkgit.read_objects(git_dir, [tip], kind="blob")


def test_fork_walk_equals_ls_tree_at_every_commit(tmp_path: Path) -> None:
    git_dir, base, tip = _fork(tmp_path)
    commits = forkgit.list_commits(git_dir, base, tip)
    assert forkwalk.linear_on(base, commits)
    walk = forkwalk.ForkWalk(treestate.tree_entries(git_dir, base))
    for commit in commits:
        walk.advance(commit)
        actual = treestate.tree_entries(git_dir, commit.sha)
        paths = set(actual) | set(treestate.tree_entries(git_dir, base))
        paths |= {p for c in commit.changes for p in (c.old_path, c.new_path) if p is not None}
        assert {p: walk.get(p) for p in paths if walk.get(p) is not None} == actual


def test_linear_on_refuses_a_chain_not_on_the_base(tmp_path: Path) -> None:
    git_dir, base, tip = _fork(tmp_path)
    commits = forkgit.list_commits(git_dir, base, tip)
    assert not forkwalk.linear_on(commits[0].sha, commits)
    assert not forkwalk.linear_on(base, commits[1:])
    # A merge on the export point: the walk is not used (check_replay lists the trees instead).
    repo = tmp_path / "fork"
    sh(["checkout", "-q", "-b", "side", base], cwd=repo)
    sh(["commit", "-q", "--allow-empty", "-m", "side"], cwd=repo)
    sh(["checkout", "-q", BRANCH], cwd=repo)
    sh(["merge", "-q", "--no-edit", "--allow-unrelated-histories", "side"], cwd=repo)
    merged = forkgit.require(git_dir, BRANCH, what="t")
    assert not forkwalk.linear_on(base, forkgit.list_commits(git_dir, base, merged))


def test_base_entries_from_the_pristine_tree_equal_the_listed_base(tmp_path: Path) -> None:
    """check computes the base's entries from the pristine tree instead of listing 30,000 files."""
    git_dir, base, _tip = _fork(tmp_path)
    listed = treestate.tree_entries(git_dir, base)
    entries = treestate.BaseEntries(DictTree(PRISTINE).read, lambda: listed)
    assert {p: entries.get(p) for p in listed} == listed
    assert entries.get(b"vllm/absent.py") is None
    lazy = treestate.LazyEntries(entries)
    added = (0o100755, "0" * 40)
    del lazy[b"vllm/nonl.py"]
    lazy[b"vllm/new.py"] = added
    assert b"vllm/nonl.py" not in lazy and b"vllm/new.py" in lazy
    assert lazy.get(b"vllm/nonl.py") is None and lazy[b"vllm/new.py"] == added
    expected = {p: e for p, e in listed.items() if p != b"vllm/nonl.py"} | {b"vllm/new.py": added}
    assert dict(lazy) == expected and len(lazy) == len(expected)
    with pytest.raises(KeyError):
        del lazy[b"vllm/nonl.py"]


def test_export_results_in_a_scratch_view_come_from_the_result_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a scratch view (no config or attributes of its own) format-patch's bytes and the binary
    paths are pure in the commits: a warm run gets them without starting git. In any other repository
    they are always computed (its attributes can change them: see the test above)."""
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    git_dir, base, tip = _fork(tmp_path)
    commits = forkgit.list_commits(git_dir, base, tip)
    expected = {c.sha: formatpatch.format_commit(git_dir, c.sha) for c in commits}
    binaries = {c.sha: binarypaths.binary_paths(git_dir, c) for c in commits}
    with forkgit.scratch_repo(borrow=git_dir) as view:
        assert batchformat.format_commits(view, commits, scratch=True) == expected
        assert binarypaths.binary_paths_of(view, commits, scratch=True) == binaries
    assert sorted(p.name for p in (tmp_path / "cache/results").iterdir()) == [
        "binary-paths",
        "format-patch",
    ]
    # Warm: a repository git cannot read would fail any git command; the cache answers instead.
    nowhere = tmp_path / "nowhere.git"
    nowhere.mkdir()
    assert batchformat.format_commits(nowhere, commits, scratch=True) == expected
    assert binarypaths.binary_paths_of(nowhere, commits, scratch=True) == binaries
    with pytest.raises(GitError):
        batchformat.format_commits(nowhere, commits)
    # Another chain (one commit fewer) is another key: computed, not confused with the cached one.
    with pytest.raises(GitError):
        batchformat.format_commits(nowhere, commits[:-1], scratch=True)
    # Off: nothing is read from the cache.
    monkeypatch.setenv("HQP_RESULT_CACHE", "0")
    with pytest.raises(GitError):
        binarypaths.binary_paths_of(nowhere, commits, scratch=True)
