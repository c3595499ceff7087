"""The write journal: what makes ``apply`` all or nothing even when the process is killed.

Before the first file of a directory is replaced, ``DIR/.hqp-journal`` is written (to a temporary
name, flushed to disk, then renamed into place): for every file the write will touch, its path, its
original bytes and mode, or that it did not exist; and the directories the write will create. The
journal is removed only after the last rename. So a directory holding a journal is one whose write
was interrupted (SIGKILL, a power loss, a rollback that failed), at any point: before its first
rename, between two, or after its last (or, after a power loss, one whose journal's removal never
reached the disk: put back as well, which leaves the directory whole as it was before).
``recover`` puts every journaled file back as it was, removes the files the write created, its
temporary files and the directories it made, then the journal; the directory is then byte for byte
what it was before the interrupted run. The next ``apply`` on the
directory does this first and says so; ``apply --check-applied`` and ``--dry-run``, which promise to
write nothing, refuse to read a directory in that state.

The format is JSON (one object, base64 for bytes), read only by this module. It is written by
hand (``_dumps``: base64 strings, integers and null need no escaping) because every ``apply`` writes
one and ``json`` with ``base64`` are 2-3 ms of imports; it reads back with ``json``, and
``tests/test_journal.py`` holds it equal to ``json.dumps(..., sort_keys=True)``.
"""

from __future__ import annotations

import binascii
import contextlib
import os
import stat
from collections.abc import Mapping, Sequence

from hyperqwen_patches.records import field, record

JOURNAL = b".hqp-journal"
TEMP_PREFIX = b".hqp-tmp-"
FORMAT = 1


class JournalError(OSError):
    """The journal cannot be read (damaged); raised with the path so the caller can name it."""


@record(frozen=True)
class Entry:
    path: bytes  # relative to the directory's real path
    original: bytes | None  # None: the file did not exist before the write
    mode: int | None


@record
class Recovery:
    """What ``recover`` did: files put back, files removed, and what it could not do."""

    restored: list[bytes] = field(default_factory=list)
    removed: list[bytes] = field(default_factory=list)
    failed: list[tuple[bytes, str]] = field(default_factory=list)  # (path, why)


def path_of(root: bytes) -> bytes:
    return os.path.join(root, JOURNAL)


def exists(root: bytes) -> bool:
    return os.path.lexists(path_of(root))


def write(root: bytes, entries: Sequence[Entry], made_dirs: Sequence[bytes]) -> None:
    """Write the journal durably: a temporary file, fsync, rename, fsync of the directory."""
    data = _dumps(entries, [os.path.relpath(d, root) for d in made_dirs])
    os.replace(write_temp(root, data, 0o600, sync=True), path_of(root))
    _fsync_dir(root)


def _dumps(entries: Sequence[Entry], made_dirs: Sequence[bytes]) -> bytes:
    """``json.dumps(doc, sort_keys=True)`` of the journal document, as ASCII bytes."""

    def b64(data: bytes) -> bytes:
        return b'"' + binascii.b2a_base64(data, newline=False) + b'"'

    def num(value: int | None) -> bytes:
        return b"null" if value is None else b"%d" % value

    items = [
        b'{"mode": %s, "original": %s, "path": %s}'
        % (num(e.mode), b"null" if e.original is None else b64(e.original), b64(e.path))
        for e in entries
    ]
    return b'{"entries": [%s], "format": %d, "made_dirs": [%s]}' % (
        b", ".join(items),
        FORMAT,
        b", ".join(b64(d) for d in made_dirs),
    )


def remove(root: bytes) -> None:
    """The commit point. Not fsynced: the journal's going is what may be lost to a power cut, and
    a journal that comes back puts the originals back on the next run, which is whole too (the
    renamed files are not fsynced either: the promise is all or nothing, not that a finished write
    survives power loss). Its fsync was a third of a 50-patch ``apply``'s disk waits (run 5)."""
    os.unlink(path_of(root))


def read(root: bytes) -> tuple[list[Entry], list[bytes]]:
    """The journal's entries and created directories (absolute); JournalError if it is damaged."""
    import json

    where = path_of(root)
    try:
        with open(where, "rb") as fh:
            doc = json.loads(fh.read())
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}")
        entries = [
            Entry(
                _unb64(e["path"]),
                None if e["original"] is None else _unb64(e["original"]),
                e["mode"],
            )
            for e in doc["entries"]
        ]
        dirs = [os.path.join(root, _unb64(d)) for d in doc["made_dirs"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise JournalError(0, f"the write journal is damaged ({exc})", os.fsdecode(where)) from None
    for e in entries:
        if e.path.startswith(b"/") or b".." in e.path.split(b"/"):
            raise JournalError(0, "the write journal names a path outside the directory", where)
    return entries, dirs


def recover(root: bytes) -> Recovery:
    """Undo an interrupted write (see the module doc); the journal goes only if everything worked."""
    entries, made_dirs = read(root)
    done = Recovery()
    for entry in entries:
        real = os.path.join(root, entry.path)
        try:
            if entry.original is None:
                # Only a regular file can be one the write created; anything else was there before.
                if os.path.isfile(real) and not os.path.islink(real):
                    os.unlink(real)
                    done.removed.append(entry.path)
                continue
            current = _read_regular(real)
            if current != entry.original or _mode(real) != entry.mode:
                restore(real, entry.original, entry.mode or 0o644)
                done.restored.append(entry.path)
        except OSError as exc:
            done.failed.append((entry.path, exc.strerror or str(exc)))
    for directory in {os.path.dirname(os.path.join(root, e.path)) for e in entries}:
        remove_temps(directory)
    for directory in sorted(made_dirs, key=len, reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(directory)
    if not done.failed:
        remove(root)
    return done


def restore(real: bytes, content: bytes, mode: int) -> None:
    """Put ``content`` back at ``real`` through a temporary file and a rename."""
    os.replace(write_temp(os.path.dirname(real), content, mode), real)


def write_temp(directory: bytes, content: bytes, mode: int, *, sync: bool = False) -> bytes:
    """A new temporary file in ``directory`` (this tool's prefix, so ``remove_temps`` finds it)
    holding ``content`` with permissions ``mode``; removed again if writing it fails."""
    fd, temp = _create_temp(directory)
    try:
        view = memoryview(content)
        while view:  # os.write may write less than asked
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    os.close(fd)
    return temp


def _create_temp(directory: bytes) -> tuple[int, bytes]:
    """A new file of our own in ``directory``, opened for writing, as ``tempfile.mkstemp`` makes one
    (O_EXCL, mode 0600, no symlink followed, a name nobody else holds), without its 6 ms import."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        name = b"%s%d-%s" % (TEMP_PREFIX, os.getpid(), os.urandom(6).hex().encode())
        path = os.path.join(directory, name)
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {os.fsdecode(directory)}")


def remove_temps(directory: bytes) -> None:
    """Remove this tool's temporary files from ``directory`` (debris of an interrupted write)."""
    with contextlib.suppress(OSError), os.scandir(directory) as it:
        for item in it:
            if item.name.startswith(TEMP_PREFIX) and item.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(item.path)


def entries_for(root: bytes, originals: Mapping[bytes, tuple[bytes, int] | None]) -> list[Entry]:
    return [
        Entry(
            os.path.relpath(real, root),
            None if orig is None else orig[0],
            None if orig is None else orig[1],
        )
        for real, orig in originals.items()
    ]


def _read_regular(real: bytes) -> bytes | None:
    try:
        info = os.lstat(real)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(info.st_mode):
        raise OSError(0, "not a regular file", real)
    with open(real, "rb") as fh:
        return fh.read()


def _mode(real: bytes) -> int | None:
    try:
        return stat.S_IMODE(os.stat(real).st_mode)
    except OSError:
        return None


def _fsync_dir(directory: bytes) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _unb64(text: str) -> bytes:
    return binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
