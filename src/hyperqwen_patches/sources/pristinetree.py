"""What every pristine source gives: a read-only tree of the release's text files, by path.

Paths are relative to the directory that holds the package (``b"vllm/envs.py"``). Binaries (``.so``
files, images, the ``vllm-rs`` executable: anything with a NUL byte in its first 8,000 bytes, git's own
rule) are left out and listed by ``binaries()``. The kinds: ``dirtree.DirTree``, ``gittree.GitTree``,
``wheeltree.WheelTree``; ``pristine.open_pristine`` picks one from a source string.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from hyperqwen_patches.errors import EnvironmentProblem

SNIFF_BYTES = 8000  # git's buffer for its binary heuristic (a NUL byte in the first 8,000 bytes)


class CorruptCacheError(EnvironmentProblem):
    """A cached file failed its integrity check (it is discarded and fetched again)."""


class Progress(Protocol):
    """How a long step reports itself; the CLI passes a rich implementation, library callers none."""

    def waiting(self, label: str) -> AbstractContextManager[None]: ...

    def download(self, label: str) -> AbstractContextManager[Callable[[int, int | None], None]]: ...


class Quiet:
    """No progress shown: what library callers get."""

    def waiting(self, label: str) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def download(self, label: str) -> AbstractContextManager[Callable[[int, int | None], None]]:
        return contextlib.nullcontext(lambda done, total: None)


class PristineTree:
    """Read-only view of a pristine tree: text files by path, binaries listed."""

    label: str

    def read(self, path: bytes) -> bytes | None:
        """The bytes of a text file, or ``None`` when the tree has no such text file."""
        raise NotImplementedError

    def paths(self) -> list[bytes]:
        """Every text file, sorted."""
        raise NotImplementedError

    def binaries(self) -> list[bytes]:
        """The files left out of the tree because they are binary, sorted."""
        raise NotImplementedError

    def close(self) -> None:
        """Release open files (idempotent)."""

    def __enter__(self) -> PristineTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_binary(head: bytes) -> bool:
    return b"\0" in head[:SNIFF_BYTES]
