"""The one git runner: bytes untouched, environment isolated, repository named explicitly."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from fixtures_git import init_repo, sh

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import EnvironmentProblem, GitError


def test_stdout_is_bytes_with_final_newline_kept(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "r")
    git_dir = gitrun.git_dir_of(repo)
    data = b"caf\xe9\r\nno final newline"
    sha = gitrun.check(["hash-object", "-w", "--stdin"], git_dir=git_dir, input=data, what="t")
    assert sha.endswith(b"\n")  # GitPython's default would strip this
    blob = gitrun.check(["cat-file", "blob", sha.strip().decode()], git_dir=git_dir, what="t")
    assert blob == data  # and its default would decode (and mangle) the Latin-1 byte


def test_global_and_system_config_are_not_read(tmp_path: Path, isolated_env: Path) -> None:
    repo = init_repo(tmp_path / "r")
    Path(os.environ["GIT_CONFIG_GLOBAL"]).write_text("[hostile]\n\tknob = yes\n")
    assert sh(["config", "hostile.knob"], cwd=repo) == b"yes\n"  # plain git sees it
    result = gitrun.run(["config", "hostile.knob"], git_dir=gitrun.git_dir_of(repo))
    assert result.code == 1 and result.stdout == b""


def test_pinned_options_beat_repository_config(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "r")
    sh(["config", "core.abbrev", "7"], cwd=repo)
    sh(["config", "core.quotePath", "false"], cwd=repo)
    out = gitrun.check(["config", "core.abbrev"], git_dir=gitrun.git_dir_of(repo), what="t")
    assert out == b"40\n"


def test_environment_config_parameters_are_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = init_repo(tmp_path / "r")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "hostile.knob")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "yes")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'hostile.other'='yes'")
    assert sh(["config", "hostile.knob"], cwd=repo) == b"yes\n"
    git_dir = gitrun.git_dir_of(repo)
    assert gitrun.run(["config", "hostile.knob"], git_dir=git_dir).code == 1
    assert gitrun.run(["config", "hostile.other"], git_dir=git_dir).code == 1


def test_inherited_git_dir_and_index_are_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git hook exports GIT_DIR and GIT_INDEX_FILE; the runner must still use the repository named."""
    ours = init_repo(tmp_path / "ours")
    other = init_repo(tmp_path / "other")
    sh(["config", "marker.repo", "other"], cwd=other)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    git_dir = gitrun.git_dir_of(ours)
    assert git_dir == (ours / ".git").resolve()
    assert gitrun.run(["config", "marker.repo"], git_dir=git_dir).code == 1
    env = gitrun.isolated_env(git_dir)
    assert env["GIT_INDEX_FILE"] == gitrun.NO_INDEX


def test_a_leaked_work_tree_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIT_WORK_TREE from a git hook: with a git dir the work tree is neutralised, without one the
    command's cwd is its work tree, and a bare repository can still be made."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".gitattributes").write_text("* diff=nope\n")
    monkeypatch.setenv("GIT_WORK_TREE", str(elsewhere))
    bare = gitrun.init_bare(tmp_path / "b.git")
    assert "bare = true" in (bare / "config").read_text()
    work = tmp_path / "w"
    work.mkdir()
    top = gitrun.run(["rev-parse", "--show-toplevel"], git_dir=None, cwd=work)
    assert elsewhere.name.encode() not in top.stdout + top.stderr
    assert list(elsewhere.iterdir()) == [elsewhere / ".gitattributes"]


def test_leaked_object_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = init_repo(tmp_path / "r")
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(tmp_path / "elsewhere"))
    with pytest.raises(EnvironmentProblem, match="GIT_OBJECT_DIRECTORY"):
        gitrun.run(["rev-parse", "--git-dir"], git_dir=repo / ".git")


def test_failure_is_a_git_error_naming_the_command(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "r")
    with pytest.raises(GitError, match=r"reading it: git cat-file -e deadbeef failed"):
        gitrun.check(
            ["cat-file", "-e", "deadbeef"], git_dir=gitrun.git_dir_of(repo), what="reading it"
        )
    result = gitrun.run(["cat-file", "-e", "deadbeef"], git_dir=gitrun.git_dir_of(repo))
    assert result.code != 0 and isinstance(result.stderr, bytes)


def test_not_a_repository(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(GitError, match="not a git repository"):
        gitrun.git_dir_of(tmp_path / "plain")
    with pytest.raises(GitError, match="no such repository"):
        gitrun.git_dir_of(tmp_path / "missing")


def test_argv_is_logged_at_debug(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = init_repo(tmp_path / "r")
    with caplog.at_level(logging.DEBUG, logger="hyperqwen_patches.gitrun"):
        gitrun.run(["rev-parse", "--git-dir"], git_dir=gitrun.git_dir_of(repo))
    assert any("rev-parse --git-dir" in r.getMessage() for r in caplog.records)


def test_cwd_is_passed_not_chdir(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "r")
    before = Path.cwd()
    out = gitrun.check(["rev-parse", "--show-prefix"], git_dir=None, cwd=repo, what="t")
    assert Path.cwd() == before
    assert out == b"\n"


def test_streamed_input_reaches_git_chunk_by_chunk(tmp_path: Path) -> None:
    """fast-import's stream is written as it is made (basecommit.write_blobs); the SHAs are git's own
    for the same bytes, checked against ``git hash-object``."""
    from hyperqwen_patches.sources.basecommit import write_blobs

    git_dir = gitrun.init_bare(tmp_path / "r.git")
    blobs = [b"", b"one\n", os.urandom(3 << 20), b"no newline"]
    shas = write_blobs(git_dir, iter(blobs))
    for data, sha in zip(blobs, shas, strict=True):
        (tmp_path / "f").write_bytes(data)
        assert sh(["hash-object", str(tmp_path / "f")], cwd=tmp_path).decode().strip() == sha


def test_a_stream_that_fails_midway_stops_git_and_raises(tmp_path: Path) -> None:
    from hyperqwen_patches.errors import UsageError
    from hyperqwen_patches.sources.basecommit import write_blobs

    git_dir = gitrun.init_bare(tmp_path / "r.git")

    def contents():  # type: ignore[no-untyped-def]
        yield b"fine\n"
        raise UsageError("b'x': listed by the pristine tree but unreadable")

    with pytest.raises(UsageError, match="unreadable"):
        write_blobs(git_dir, contents())


def test_git_failing_while_fed_is_a_git_error(tmp_path: Path) -> None:
    """git exits early (a bad stream): the broken pipe is not our error; git's message is."""
    git_dir = gitrun.init_bare(tmp_path / "r.git")
    chunks = (b"not a fast-import command\n" * 1000 for _ in range(200))
    with pytest.raises(GitError, match="writing blobs"):
        gitrun.check(
            ["fast-import", "--quiet"], git_dir=git_dir, input=chunks, what="writing blobs"
        )


def test_repositories_made_here_are_sha1_whatever_git_default_hash_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hyperqwen_patches.sources.basecommit import write_blobs

    monkeypatch.setenv("GIT_DEFAULT_HASH", "sha256")
    git_dir = gitrun.init_bare(tmp_path / "r.git")
    (sha,) = write_blobs(git_dir, [b"x\n"])
    assert sha == "587be6b4c3f93f93c489c0111bba5596147a26cb"  # git hash-object of "x\n", SHA-1


def test_a_repositorys_grafts_are_not_honoured(tmp_path: Path) -> None:
    """info/grafts rewrites parents; every read here sees the commits as stored (export and check
    alike)."""
    repo = init_repo(tmp_path / "r")
    for i in range(3):
        (repo / "f").write_text(f"{i}\n")
        sh(["add", "f"], cwd=repo)
        sh(["commit", "-q", "-m", f"c{i}"], cwd=repo)
    tip = sh(["rev-parse", "HEAD"], cwd=repo).decode().strip()
    (repo / ".git/info").mkdir(exist_ok=True)
    (repo / ".git/info/grafts").write_text(tip + "\n")  # the tip, parentless
    assert sh(["rev-list", "HEAD"], cwd=repo).decode().split() == [tip]  # plain git honours it
    ours = gitrun.check(["rev-list", tip], git_dir=repo / ".git", what="listing")
    assert len(ours.split()) == 3


def test_a_linked_worktree_is_a_repository_given_by_its_top(tmp_path: Path) -> None:
    """A linked worktree's `.git` is a file naming its git dir: the repository a user names by the
    worktree's top is that git dir (the series repository checked out with `git worktree add`)."""
    repo = init_repo(tmp_path / "r")
    (repo / "f").write_text("x\n")
    sh(["add", "f"], cwd=repo)
    sh(["commit", "-q", "-m", "c"], cwd=repo)
    sh(["worktree", "add", "-q", str(tmp_path / "wt")], cwd=repo)
    found = gitrun.git_dir_of(tmp_path / "wt")
    assert found == (repo / ".git/worktrees/wt").resolve()
    head = gitrun.check(["rev-parse", "HEAD"], git_dir=found, what="reading")
    assert head.strip() == sh(["rev-parse", "HEAD"], cwd=repo).strip()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad/.git").write_text("not a gitfile\n")
    with pytest.raises(GitError, match="without a gitdir"):
        gitrun.git_dir_of(tmp_path / "bad")
