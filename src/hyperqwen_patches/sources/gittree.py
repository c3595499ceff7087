"""A pristine tree from git: ``git:PATH@REF``, the package's subtree of a checkout at a ref."""

from __future__ import annotations

import os
from pathlib import Path

from hyperqwen_patches.errors import UsageError
from hyperqwen_patches.sources.pristinetree import PristineTree, is_binary


def _git(args: list[str], git_dir: Path) -> tuple[int, bytes, bytes]:
    """A read of the source repository through the one git runner: the same isolation as the fork's
    reads (no user or repository config that changes output, no GIT_DIR from the environment)."""
    from hyperqwen_patches import gitrun

    result = gitrun.run(args, git_dir=git_dir)
    return result.code, result.stdout, result.stderr


class GitTree(PristineTree):
    """The ``<package>/`` subtree of a git checkout at a ref; files read with ``git cat-file``."""

    def __init__(self, repo: Path, ref: str, *, package: str) -> None:
        self.repo = repo
        self.package = package
        self.label = f"git:{repo}@{ref}"
        if not repo.exists():
            raise UsageError(f"source {self.label}: {repo} does not exist")
        from hyperqwen_patches import gitrun

        self.git_dir = gitrun.git_dir_of(repo)
        code, out, err = _git(
            ["rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}"], self.git_dir
        )
        if code != 0:
            raise UsageError(
                f"source {self.label}: {ref!r} is not a commit in {repo} "
                f"({err.decode(errors='replace').strip().splitlines()[-1] if err.strip() else 'git failed'})"
            )
        self.commit = out.strip().decode()
        self._listing: tuple[list[bytes], list[bytes]] | None = None

    def read(self, path: bytes) -> bytes | None:
        if not path.startswith(self.package.encode() + b"/"):
            return None
        code, out, _ = _git(
            ["cat-file", "blob", f"{self.commit}:{os.fsdecode(path)}"], self.git_dir
        )
        if code != 0 or is_binary(out):
            return None
        return out

    def _list(self) -> tuple[list[bytes], list[bytes]]:
        if self._listing is None:
            code, out, err = _git(
                ["ls-tree", "-r", "-z", "-l", "--full-tree", self.commit, "--", self.package],
                self.git_dir,
            )
            if code != 0:
                raise UsageError(
                    f"source {self.label}: git ls-tree failed: {err.decode(errors='replace').strip()}"
                )
            every: list[bytes] = []
            empty: set[bytes] = set()
            for entry in filter(None, out.split(b"\0")):  # "<mode> blob <sha> <size>\t<path>"
                meta, _, path = entry.partition(b"\t")
                if meta.split()[1] != b"blob":
                    continue  # a gitlink (submodule) has no content here
                every.append(path)
                if meta.split()[3] == b"0":
                    empty.add(path)
            # git grep -I lists the text files by git's own binary rule (NUL in the first 8,000 bytes);
            # an empty file has no line to match, so it is text by its size (a wheel lists it too).
            code, out, _ = _git(
                ["grep", "-I", "-z", "--name-only", "-e", "", self.commit, "--", self.package],
                self.git_dir,
            )
            prefix = self.commit.encode() + b":"
            text = {p.removeprefix(prefix) for p in out.split(b"\0") if p} | empty
            self._listing = (sorted(text), sorted(p for p in every if p not in text))
        return self._listing

    def paths(self) -> list[bytes]:
        return list(self._list()[0])

    def binaries(self) -> list[bytes]:
        return list(self._list()[1])
