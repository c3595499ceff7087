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


# What lives under the cache root, and whether an entry can be made again without the network.
AREAS: dict[str, tuple[str, bool]] = {
    "pypi": ("releases fetched from the package index (wheels, sdists), verified", False),
    "base": ("base commits of pinned releases (git repositories)", True),
    "bundles": ("fork bundles fetched for check", True),
    "results": ("results of pure checks and the manifest's model, by content", True),
    "envs": ("the vLLM test environments of scripts/vllm-env", False),
    "tools": ("tools the test scripts installed", False),
    "wheels": ("wheels the test scripts built or fetched", False),
    "docker-ci": ("work directories of scripts/docker-ci", True),
    "locks": ("lock files (empty)", True),
}


def tree_size(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``; links are not followed."""
    files = size = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            files += 1
            size += st.st_size
    return files, size


def prunable(root: Path, *, older_than_days: float, now: float) -> list[Path]:
    """What ``cache --prune`` removes: staging debris of killed runs (any age), and entries that are
    made again locally (``AREAS``' rebuildable ones: result entries, base commits, bundles) not
    written for ``older_than_days``. Releases and test environments, which need the network again,
    are kept."""
    out: list[Path] = []
    cutoff = now - older_than_days * 86400
    for area, (_, rebuildable) in AREAS.items():
        top = root / area
        if not top.is_dir():
            continue
        for entry in sorted(top.iterdir()):
            debris = ".staging-" in entry.name or entry.name.startswith((".tmp-", ".tmp"))
            if area == "results" and entry.is_dir():  # one directory per check: its entries
                out += [f for f in sorted(entry.iterdir()) if _older(f, cutoff)]
            elif debris or (rebuildable and area != "locks" and _older(entry, cutoff)):
                out.append(entry)
    return out


def _older(path: Path, cutoff: float) -> bool:
    try:
        return path.lstat().st_mtime < cutoff
    except OSError:
        return False
