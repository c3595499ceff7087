"""The one cache root every cache lives under (pristine releases, results, bundles, base commits)."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

TYPE_CHECKING = False  # not typing's: importing typing costs more than this module's work
if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager
    from typing import IO


def cache_dir() -> Path:
    """The cache root: ``$HQP_CACHE``, else ``$XDG_CACHE_HOME/hyperqwen-patches``, else ``~/.cache/...``."""
    if os.environ.get("HQP_CACHE"):
        return Path(os.environ["HQP_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "hyperqwen-patches"


@contextlib.contextmanager
def entry_lock(
    cache_root: Path,
    name: str,
    *,
    waiting: Callable[[], AbstractContextManager[None]] | None = None,
) -> Iterator[None]:
    """Hold the exclusive lock for building the cache entry ``name`` (``locks/<name>.lock``), waiting
    for another process that holds it (inside ``waiting()`` when given: a progress line).

    Entries are still built under a temporary name and published by one rename; the lock is what
    stops a second process from judging a half-published entry unusable and removing it while the
    first uses it (8 concurrent cold runs: 4-6 failed). Whoever waited re-checks the entry first."""
    from hyperqwen_patches import flocks

    locks = cache_root / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with flocks.exclusive(locks / f"{name}.lock", wait=None, waiting=waiting):
        yield


@contextlib.contextmanager
def entry_shared_lock(cache_root: Path, name: str) -> Iterator[None]:
    """The entry's lock (:func:`entry_lock`), shared: held by a run that uses the entry (a warm
    ``check`` borrowing a base commit). Any number of users hold it at once; a build waits for them
    and ``cache --prune`` (exclusive, not waiting) skips the entry while one does. Not to be taken
    by a process that already holds the exclusive lock of ``name`` (flock would wait on itself)."""
    import fcntl

    path = cache_root / "locks" / f"{name}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh: IO[bytes] = open(path, "a+b")  # noqa: SIM115  (closed below, after the unlock)
    except OSError:
        try:  # a cache this user cannot write (tests/test_cache_readonly.py): flock needs no write
            fh = open(path, "rb")  # noqa: SIM115
        except OSError:
            # No lock file and no right to make one: this user's prune could not remove the
            # entry either, so there is nothing to hold it against.
            yield
            return
    with fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def entry_lock_if_free(cache_root: Path, name: str) -> Iterator[bool]:
    """The entry's lock (:func:`entry_lock`) if no process holds it, without waiting: yields whether
    it was taken. ``cache --prune`` removes an entry or its staging debris only under it, so it
    never deletes what a running build is writing or a running check is using."""
    import fcntl

    locks = cache_root / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def entry_name(path: Path) -> str | None:
    """The cache entry a prunable path belongs to (its lock's name): the entry itself, or the entry
    a staging directory (``.NAME.staging-…``) or a download's temporary (``.tmp-NAME-PID-ID``) was
    building; None for a result cache temporary, which has no lock (its writer renames it whole)."""
    name = path.name
    if ".staging-" in name and name.startswith("."):
        return name[1:].partition(".staging-")[0]
    if name.startswith(".tmp-"):
        parts = name[len(".tmp-") :].rsplit("-", 2)
        return parts[0] if len(parts) == 3 else None
    return name


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


# A temporary without a lock of its own counts as a killed run's debris only after this long.
DEBRIS_AGE = 600


def prunable(root: Path, *, older_than_days: float, now: float) -> list[Path]:
    """What ``cache --prune`` removes: staging debris of killed runs (any age), and entries that are
    made again locally (``AREAS``' rebuildable ones: result entries, base commits, bundles) not
    written for ``older_than_days``. Releases and test environments, which need the network again,
    are kept."""
    out: list[Path] = []
    cutoff = now - older_than_days * 86400
    for area, (_, rebuildable) in AREAS.items():
        top = root / area
        if top.is_symlink() or not top.is_dir():
            continue  # an area that is a link leads outside the cache: never pruned through
        for entry in sorted(top.iterdir()):
            debris = ".staging-" in entry.name or entry.name.startswith((".tmp-", ".tmp"))
            if debris and entry_name(entry) is None and not _older(entry, now - DEBRIS_AGE):
                continue  # a result being written right now (it has no lock to ask)
            if area == "results" and entry.is_dir() and not entry.is_symlink():
                out += [f for f in sorted(entry.iterdir()) if _older(f, cutoff)]
            elif debris or (rebuildable and area != "locks" and _older(entry, cutoff)):
                out.append(entry)
    return out


def _older(path: Path, cutoff: float) -> bool:
    try:
        return path.lstat().st_mtime < cutoff
    except OSError:
        return False
