"""The one cache root every cache lives under (pristine releases, results, bundles, base commits)."""

from __future__ import annotations

import contextlib
import errno
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


KEY_BYTES = 32


def secret_key(name: str, *, create: bool) -> bytes | None:
    """The random key ``keys/<name>.key`` (32 bytes, 0600 in a 0700 directory); None when it does
    not exist and ``create`` is false. OSError when it cannot be read or made, or is damaged.

    What it signs must be trusted only by this user: the key lives in the user's cache, never
    beside what it signs. Made once, durably (a key lost to a power cut would make the journal it
    signed untrusted), and published by ``link``, which fails where a concurrent first run already
    published its own: the loser reads the winner's, so every run uses the same key."""
    keys = cache_dir() / "keys"
    path = os.fsencode(keys / f"{name}.key")
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path + b".%d-%s" % (os.getpid(), os.urandom(6).hex().encode())
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(temp, path)
    finally:
        os.unlink(temp)
    dir_fd = os.open(keys, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return _read_key(path)


def _read_key(path: bytes) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise OSError(errno.EINVAL, f"damaged key ({len(key)} bytes, not {KEY_BYTES})", path)
    return key


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
    "keys": (
        "the key that signs apply's write journals (a killed apply's is trusted with it only)",
        False,
    ),
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
