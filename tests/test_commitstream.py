"""fork/commitstream.py against git's own plumbing: every commit it writes is the one ``commit-tree``
writes from the same tree, parent, identity and message (same SHA), whatever the identity, paths and
modes; no ref is left behind; a bad stream fails naming git's error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hyperqwen_patches.errors import GitError, UsageError
from hyperqwen_patches.fork.commitstream import CommitStream, clean_ident_part
from hyperqwen_patches.sources import basecommit

ENV = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(
    repo: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None
) -> bytes:
    import os

    full = {**os.environ, **ENV, **(env or {})}
    return subprocess.run(
        ["git", *args], cwd=repo, input=input, capture_output=True, check=True, env=full
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    return repo


def base_commit(repo: Path) -> str:
    """A root commit with a few files, written by git itself."""
    files = {"a.py": b"a\n", "dir/b.py": b"b\n", "run.sh": b"#!/bin/sh\n", "gone.txt": b"x\n"}
    entries = b""
    for path, data in files.items():
        sha = git(repo, "hash-object", "-w", "--stdin", input=data).decode().strip()
        mode = "100755" if path.endswith(".sh") else "100644"
        entries += f"{mode} {sha}\t{path}\0".encode()
    index = repo / ".git" / "tmp-index"
    git(repo, "update-index", "--add", "-z", "--index-info", input=entries,
        env={"GIT_INDEX_FILE": str(index)})  # fmt: skip
    tree = git(repo, "write-tree", env={"GIT_INDEX_FILE": str(index)}).decode().strip()
    index.unlink()
    return basecommit.commit_tree(
        repo / ".git", tree, message=b"base\n", env=basecommit.fixed_identity_env()
    )


def expected_commit(repo: Path, parent: str, files: dict[str, tuple[str, bytes] | None],
                    message: bytes, env: dict[str, str]) -> str:  # fmt: skip
    """What git's plumbing writes for ``parent`` + ``files`` (path -> (mode, data) or None)."""
    index = repo / ".git" / "oracle-index"
    ienv = {"GIT_INDEX_FILE": str(index)}
    git(repo, "read-tree", parent, env=ienv)
    for path, change in files.items():
        if change is None:
            git(repo, "update-index", "--force-remove", "--", path, env=ienv)
        else:
            mode, data = change
            sha = git(repo, "hash-object", "-w", "--stdin", input=data).decode().strip()
            git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{sha},{path}", env=ienv)
    tree = git(repo, "write-tree", env=ienv).decode().strip()
    index.unlink()
    return basecommit.commit_tree(repo / ".git", tree, parents=[parent], message=message, env=env)


IDENTITIES = [
    ("Ada Lovelace", "ada@example.org"),
    ("  'Quoted, Name';  ", " <spaced@example.org> "),
    ("Zoë Ünïcode — em dash", "zoe@exämple.org"),
    ("a<b>c", "x@y"),
    ("trailing.dot.", "dot@example.org."),
    (".leading dot", "'q'@example.org"),
]


@pytest.mark.parametrize("name,email", IDENTITIES)
def test_a_chain_of_commits_is_what_commit_tree_writes(repo: Path, name: str, email: str) -> None:
    base = base_commit(repo)
    env = basecommit.fixed_identity_env("1700000000 +0130")
    env["GIT_AUTHOR_NAME"], env["GIT_AUTHOR_EMAIL"] = name, email
    steps: list[dict[str, tuple[str, bytes] | None]] = [
        {"a.py": ("100644", b"a\nchanged\n"), "new dir/with space.py": ("100644", b"new\n")},
        {
            "gone.txt": None,
            'q"uote\\d.py': ("100644", b"q\n"),
            "run.sh": ("100644", b"#!/bin/sh\n"),
        },
        {"dir/b.py": ("100755", b"b\n"), "ünï/cödé.py": ("100644", b"\xff\xfe binary\0\n")},
    ]
    ours, theirs = base, base
    written: list[str] = []
    with CommitStream(repo / ".git") as stream:
        for number, files in enumerate(steps):
            message = f"step {number}\n\nbody with trailing spaces   \n".encode()
            changes = [
                (p.encode(), None if c is None else int(c[0], 8), None if c is None else c[1])
                for p, c in files.items()
            ]
            ours = stream.commit(ours, changes, message, env)
            written.append(ours)
    for number, files in enumerate(steps):
        message = f"step {number}\n\nbody with trailing spaces   \n".encode()
        theirs = expected_commit(repo, theirs, files, message, env)
        assert written[number] == theirs, f"step {number}"
    assert git(repo, "for-each-ref").strip() == b""  # no ref written, not even the scratch one


def test_a_mode_change_by_blob_sha(repo: Path) -> None:
    base = base_commit(repo)
    env = basecommit.fixed_identity_env()
    sha = git(repo, "rev-parse", f"{base}:a.py").decode().strip()
    with CommitStream(repo / ".git") as stream:
        ours = stream.commit(base, [(b"a.py", 0o100755, sha)], b"mode\n", env)
    assert ours == expected_commit(repo, base, {"a.py": ("100755", b"a\n")}, b"mode\n", env)


@pytest.mark.parametrize(
    "raw,clean",
    [
        (b"  Name  ", b"Name"),
        (b"'<x>'", b"x"),
        (b"a\nb", b"ab"),
        (b'"Q" <q@x>', b'Q" q@x'),
        (b".lead.", b"lead"),
    ],
)
def test_identity_crud_is_dropped_as_git_drops_it(raw: bytes, clean: bytes) -> None:
    assert clean_ident_part(raw) == clean


def test_a_name_of_crud_only_is_refused(repo: Path) -> None:
    base = base_commit(repo)
    env = basecommit.fixed_identity_env()
    env["GIT_AUTHOR_NAME"] = " ,; "
    with CommitStream(repo / ".git") as stream, pytest.raises(UsageError, match="GIT_AUTHOR_NAME"):
        stream.commit(base, [], b"m\n", env)


def test_a_parent_git_does_not_have_fails_naming_it(repo: Path) -> None:
    base_commit(repo)
    with (
        pytest.raises(GitError, match=r"fast-import.*0123456789"),
        CommitStream(repo / ".git") as s,
    ):
        s.commit("0123456789" * 4, [], b"m\n", basecommit.fixed_identity_env())
