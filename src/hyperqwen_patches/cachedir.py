"""The one cache root every cache lives under (pristine releases, results, bundles, base commits)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def cache_dir() -> Path:
    """The cache root: ``$HQP_CACHE``, else ``$XDG_CACHE_HOME/hyperqwen-patches``, else ``~/.cache/...``."""
    if os.environ.get("HQP_CACHE"):
        return Path(os.environ["HQP_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "hyperqwen-patches"


@contextlib.contextmanager
def entry_lock(cache_root: Path, name: str) -> Iterator[None]:
    """Hold the exclusive lock for building the cache entry ``name`` (``locks/<name>.lock``).

    Entries are still built under a temporary name and published by one rename; the lock is what
    stops a second process from judging a half-published entry unusable and removing it while the
    first uses it (8 concurrent cold runs: 4-6 failed). Whoever waited re-checks the entry first."""
    import fcntl

    locks = cache_root / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def staging_dir(parent: Path, name: str) -> Path:
    """A new directory in ``parent`` to build the cache entry ``name`` in, before its one rename.

    The caller holds the entry's lock (:func:`entry_lock`), so an earlier staging directory of the
    same entry is debris of a killed run: it is removed here, so kills never accumulate. Made with
    the umask's mode, not ``mkdtemp``'s 0700, so a cache shared by a team or a CI image stays
    readable by everyone it was readable to before."""
    import shutil

    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(f".{name}.staging-*"):
        shutil.rmtree(stale, ignore_errors=True)
    path = parent / f".{name}.staging-{os.getpid()}-{os.urandom(4).hex()}"
    path.mkdir()
    return path
