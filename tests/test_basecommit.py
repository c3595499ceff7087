"""The pristine base commit: the same SHA on every machine, written without touching the repository."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from fixtures_git import PRISTINE, DictTree, init_repo, make_hostile, sh

from hyperqwen_patches import gitrun
from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.sources import basecommit

REPO_ROOT = Path(__file__).resolve().parent.parent
# The fixture tree's base SHA, computed once and frozen: any change to identity, dates, message or mode
# normalisation changes it, and that would orphan every fork built on the old base.
FIXTURE_BASE = "18cf6b708adc146f162cb0cbc6b77820b6e00981"


def _git_dir(repo: Path) -> Path:
    return gitrun.git_dir_of(repo)


def test_same_sha_in_two_repositories_and_frozen(tmp_path: Path) -> None:
    a = basecommit.write_base_commit(
        _git_dir(init_repo(tmp_path / "a")), DictTree(PRISTINE), package="vllm", version="0.29.0"
    )
    b = basecommit.write_base_commit(
        gitrun.init_bare(tmp_path / "b.git"), DictTree(PRISTINE), package="vllm", version="0.29.0"
    )
    assert a == b
    assert a.commit == FIXTURE_BASE
    assert a.files == len(PRISTINE)


def test_hostile_config_does_not_change_the_sha(tmp_path: Path, isolated_env: Path) -> None:
    repo = init_repo(tmp_path / "r")
    make_hostile(repo, isolated_env)  # core.autocrlf, commit.gpgSign, i18n encodings...
    sh(["config", "user.name", "Someone Else"], cwd=repo)
    got = basecommit.write_base_commit(
        _git_dir(repo), DictTree(PRISTINE), package="vllm", version="0.29.0"
    )
    assert got.commit == FIXTURE_BASE


def test_commit_object_is_pinned_and_modes_normalised(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "r")
    got = basecommit.write_base_commit(
        _git_dir(repo), DictTree(PRISTINE), package="vllm", version="0.29.0"
    )
    raw = sh(["cat-file", "commit", got.commit], cwd=repo)
    assert (
        raw
        == (
            f"tree {got.tree}\n"
            "author hyperqwen-patches <pristine@hyperqwen-patches.invalid> 946684800 +0000\n"
            "committer hyperqwen-patches <pristine@hyperqwen-patches.invalid> 946684800 +0000\n"
            "\n"
            "vllm 0.29.0 pristine tree\n"
        ).encode()
    )
    listing = sh(["ls-tree", "-r", "-z", got.commit], cwd=repo).split(b"\0")
    modes = {entry.split(b" ")[0] for entry in listing if entry}
    assert modes == {b"100644"}  # vllm/tools/run.sh starts with #! but is not made executable
    for path, data in PRISTINE.items():  # bytes kept: Latin-1, CRLF, no final newline
        assert sh(["cat-file", "blob", f"{got.commit}:{os.fsdecode(path)}"], cwd=repo) == data


def test_repository_state_is_untouched(tmp_path: Path) -> None:
    """Work tree, index, HEAD, refs and config of the target repository are left as they were."""
    repo = init_repo(tmp_path / "r")
    (repo / "file").write_text("user's work\n")
    sh(["add", "file"], cwd=repo)
    sh(["commit", "-q", "-m", "user commit"], cwd=repo)
    (repo / "file").write_text("uncommitted edit\n")
    git_dir = repo / ".git"

    def state() -> tuple[bytes, ...]:
        return (
            (git_dir / "index").read_bytes(),
            (git_dir / "HEAD").read_bytes(),
            (git_dir / "config").read_bytes(),
            sh(["for-each-ref"], cwd=repo),
            (repo / "file").read_bytes(),
            sh(["status", "--porcelain=v1", "-uall"], cwd=repo),
        )

    before = state()
    basecommit.write_base_commit(
        _git_dir(repo), DictTree(PRISTINE), package="vllm", version="0.29.0"
    )
    assert state() == before
    assert sh(["cat-file", "-t", FIXTURE_BASE], cwd=repo) == b"commit\n"


def test_different_content_or_pin_gives_a_different_sha(tmp_path: Path) -> None:
    git_dir = gitrun.init_bare(tmp_path / "r.git")
    changed = dict(PRISTINE)
    changed[b"vllm/envs.py"] += b"# one more line\n"
    other = basecommit.write_base_commit(
        git_dir, DictTree(changed), package="vllm", version="0.29.0"
    )
    other_pin = basecommit.write_base_commit(
        git_dir, DictTree(PRISTINE), package="vllm", version="0.30.0"
    )
    assert len({other.commit, other_pin.commit, FIXTURE_BASE}) == 3


@pytest.mark.parametrize(
    "bad", [b"../escape.py", b"/abs.py", b"vllm//x.py", b"vllm/./x.py", b"vllm/.git/x"]
)
def test_bad_paths_are_refused(tmp_path: Path, bad: bytes) -> None:
    git_dir = gitrun.init_bare(tmp_path / "r.git")
    with pytest.raises(UsageError, match="not a valid path"):
        basecommit.write_base_commit(
            git_dir, DictTree({**PRISTINE, bad: b"x\n"}), package="vllm", version="0.29.0"
        )


def test_empty_tree_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="has no files"):
        basecommit.write_base_commit(
            gitrun.init_bare(tmp_path / "r.git"), DictTree({}), package="vllm", version="0.29.0"
        )


def _documented_base() -> tuple[str, str]:
    text = (REPO_ROOT / "docs" / "fork.md").read_text()
    commit = re.search(r"base commit of vllm 0\.29\.0: `([0-9a-f]{40})`", text)
    tree = re.search(r"its tree: `([0-9a-f]{40})`", text)
    assert commit and tree, "docs/fork.md must state the 0.29.0 base commit and tree"
    return commit.group(1), tree.group(1)


@pytest.mark.network
@pytest.mark.slow
def test_real_0_29_0_base_matches_docs_and_an_independent_build(tmp_path: Path) -> None:
    """A fresh build from the PyPI wheel (cached, else downloaded) reproduces the SHA in docs/fork.md;
    and plain ``git add`` of the unzipped wheel's text files gives the same tree (independent oracle)."""
    from hyperqwen_patches.sources.pristine import open_pristine

    documented_commit, documented_tree = _documented_base()
    tree = open_pristine("pypi:vllm==0.29.0", version="0.29.0")
    got = basecommit.write_base_commit(
        gitrun.init_bare(tmp_path / "r.git"), tree, package="vllm", version="0.29.0"
    )
    assert (got.commit, got.tree) == (documented_commit, documented_tree)

    # Oracle: write the same files to disk, let plain git build the tree.
    oracle = init_repo(tmp_path / "oracle")
    for path in tree.paths():
        target = oracle / os.fsdecode(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = tree.read(path)
        assert data is not None
        target.write_bytes(data)
    subprocess.run(["git", "add", "-A", "vllm"], cwd=oracle, check=True)
    assert sh(["write-tree"], cwd=oracle).strip().decode() == documented_tree


def test_cached_base_for_immutable_sources(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tree = DictTree(PRISTINE)
    assert basecommit.cached_base(cache, "dir:/x", tree, package="vllm", version="0.29.0") is None
    got = basecommit.cached_base(cache, "pypi:vllm==0.29.0", tree, package="vllm", version="0.29.0")
    assert got is not None
    entry, commit = got
    assert commit == FIXTURE_BASE and entry.name == "pypi_vllm==0.29.0.git"
    assert sh(["--git-dir", str(entry), "cat-file", "-t", commit], cwd=tmp_path) == b"commit\n"

    class Exploding(DictTree):
        def read(self, path: bytes) -> bytes | None:
            raise AssertionError("a warm cache must not read the tree")

    warm = basecommit.cached_base(
        cache, "pypi:vllm==0.29.0", Exploding(PRISTINE), package="vllm", version="0.29.0"
    )
    assert warm == got
    # A half-written entry (no marker, as after an interrupted run) is not trusted: rebuilt.
    (entry / basecommit.BASE_MARKER).unlink()
    rebuilt = basecommit.cached_base(
        cache, "pypi:vllm==0.29.0", tree, package="vllm", version="0.29.0"
    )
    assert rebuilt == got and (entry / basecommit.BASE_MARKER).is_file()
    # A marker naming an object that is not there is not trusted either.
    (entry / basecommit.BASE_MARKER).write_text("0" * 40 + "\n")
    again = basecommit.cached_base(
        cache, "pypi:vllm==0.29.0", tree, package="vllm", version="0.29.0"
    )
    assert again == got
    assert [p.name for p in (cache / "base").iterdir()] == [entry.name]  # no temporary left


def test_a_killed_build_leaves_no_lasting_debris_and_entries_keep_the_umask(
    tmp_path: Path,
) -> None:
    """A build killed mid-way leaves its staging directory; the next build of that entry (under the
    entry's lock, so no one else is using it) removes it. Entries are made with the umask's mode, not
    mkdtemp's 0700, so a cache shared by a team stays readable."""
    cache = tmp_path / "cache"
    name = "pypi_vllm==0.29.0.git"
    debris = cache / "base" / f".{name}.staging-4242-deadbeef"
    (debris / "objects").mkdir(parents=True)
    other = cache / "base" / f".{name}x.staging-1-aa"  # another entry's: not ours to remove
    other.mkdir()
    old = os.umask(0o022)
    try:
        got = basecommit.cached_base(
            cache, "pypi:vllm==0.29.0", DictTree(PRISTINE), package="vllm", version="0.29.0"
        )
    finally:
        os.umask(old)
    assert got is not None and got[1] == FIXTURE_BASE
    assert not debris.exists() and other.exists()
    assert (got[0].stat().st_mode & 0o777) == 0o755
