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

A journal is trusted only if it is ours. Whoever can write into DIR can plant one, and the next
``apply`` (root, in an image build) would write its bytes wherever it says. So its first line
carries a keyed BLAKE2b of DIR's real path and the document, under a key kept in the user's cache
(``cachedir.secret_key``), never in DIR; a journal without that line, with another MAC, or written
by another user or for another directory, is refused before anything is read from it
(``UntrustedJournal``). Every path a trusted one names is still walked from DIR with no symbolic
link followed (``confined.py``), and the next run refuses it whole when a directory on the way has
become a link: nothing written (``recover(refuse_links=True)``).

The document is JSON (one object, base64 for bytes), read only by this module. It is written by
hand (``_dumps``: base64 strings, integers and null need no escaping) because every ``apply`` writes
one and ``json`` with ``base64`` are 2-3 ms of imports; it reads back with ``json``, and
``tests/test_journal.py`` holds it equal to ``json.dumps(..., sort_keys=True)``.
"""

from __future__ import annotations

import binascii
import contextlib
import errno
import os
import stat
from collections.abc import Mapping, Sequence

from hyperqwen_patches.display import show
from hyperqwen_patches.records import field, record
from hyperqwen_patches.sources.confined import Confined, is_plain, parent_of

try:  # hashlib.blake2b is this type; hashlib's first import loads OpenSSL (4 ms of every write)
    from _blake2 import blake2b
except ImportError:  # other interpreters
    from hashlib import blake2b

JOURNAL = b".hqp-journal"
TEMP_PREFIX = b".hqp-tmp-"
FORMAT = 2  # 1: unsigned (refused now: any such journal could have been planted)
MAGIC = b"hqp-journal %d " % FORMAT
KEY_NAME = "journal"
_MAC_HEX = 64


class JournalError(OSError):
    """The journal cannot be read (damaged); raised with the path so the caller can name it."""


class UntrustedJournal(Exception):
    """The journal is not one this tool wrote for this directory under this user's key, or it
    names a path through a symbolic link: it is not acted on at all. The message says which."""


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


def exists(where: Confined | bytes) -> bool:
    if isinstance(where, bytes):
        return os.path.lexists(path_of(where))
    try:
        os.stat(JOURNAL, dir_fd=where.fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def signing_key(*, create: bool) -> bytes | None:
    """The user's key that journals are signed with (``cachedir.secret_key``)."""
    from hyperqwen_patches.cachedir import secret_key

    return secret_key(KEY_NAME, create=create)


def _mac(key: bytes, root: bytes, doc: bytes) -> bytes:
    """Keyed BLAKE2b (a MAC as it stands, no HMAC construction needed) of DIR's real path and the
    document: a journal copied from another directory does not verify in this one."""
    h = blake2b(key=key, digest_size=_MAC_HEX // 2, person=b"hqp-journal")
    h.update(b"%d:" % len(root))
    h.update(root)
    h.update(doc)
    return h.hexdigest().encode("ascii")


def write(
    where: Confined, key: bytes, entries: Sequence[Entry], made_dirs: Sequence[bytes]
) -> None:
    """Write the journal durably: a temporary file, fsync, rename, fsync of the directory."""
    doc = _dumps(entries, made_dirs)
    data = MAGIC + _mac(key, where.root, doc) + b"\n" + doc
    temp = write_temp(where.fd, data, 0o600, sync=True)
    try:
        os.rename(temp, JOURNAL, src_dir_fd=where.fd, dst_dir_fd=where.fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=where.fd)
        raise
    os.fsync(where.fd)


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


def remove(where: Confined) -> None:
    """The commit point. Not fsynced: the journal's going is what may be lost to a power cut, and
    a journal that comes back puts the originals back on the next run, which is whole too (the
    renamed files are not fsynced either: the promise is all or nothing, not that a finished write
    survives power loss). Its fsync was a third of a 50-patch ``apply``'s disk waits (run 5)."""
    os.unlink(JOURNAL, dir_fd=where.fd)


def read(where: Confined) -> tuple[list[Entry], list[bytes]]:
    """The journal's entries and created directories (relative to DIR). UntrustedJournal if it is
    not ours; JournalError if it is ours and damaged (which only a bug or a disk fault makes)."""
    data = _read_own_file(where)
    head, newline, doc = data.partition(b"\n")
    if not head.startswith(MAGIC) or len(head) != len(MAGIC) + _MAC_HEX or not newline:
        raise UntrustedJournal("it is not signed (an earlier version's journal, or a planted one)")
    key = signing_key(create=False)
    if key is None:
        raise UntrustedJournal(
            "the key it would be verified with is not in this user's cache "
            "(another user wrote it, or the cache was removed)"
        )
    import hmac

    if not hmac.compare_digest(head[len(MAGIC) :], _mac(key, where.root, doc)):
        raise UntrustedJournal(
            "its signature does not verify: it was not written for this directory under this "
            "user's key"
        )
    import json

    try:
        parsed = json.loads(doc)
        if parsed.get("format") != FORMAT:
            raise ValueError(f"format {parsed.get('format')!r}")
        entries = [
            Entry(
                _unb64(e["path"]),
                None if e["original"] is None else _unb64(e["original"]),
                e["mode"],
            )
            for e in parsed["entries"]
        ]
        dirs = [_unb64(d) for d in parsed["made_dirs"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise JournalError(
            0, f"the write journal is damaged ({exc})", os.fsdecode(path_of(where.root))
        ) from None
    for path in [e.path for e in entries] + dirs:
        if not is_plain(path):
            raise UntrustedJournal(
                f"it names {path!r}, which is not a plain path inside the directory"
            )
    return entries, dirs


def _read_own_file(where: Confined) -> bytes:
    """The journal's bytes, from a regular file in DIR itself (a link or a FIFO planted under its
    name is refused, not followed or waited on)."""
    try:
        fd = os.open(
            JOURNAL, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=where.fd
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedJournal("it is a symbolic link") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UntrustedJournal("it is not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def through_links(
    where: Confined, entries: Sequence[Entry], made_dirs: Sequence[bytes]
) -> str | None:
    """Why the journal cannot be acted on as it stands: the first path it names whose way from DIR
    passes a symbolic link (or a file where a directory was); None when every way is plain. A
    directory that no longer exists is fine: the write created it, or its files are missing."""
    for path in sorted({parent_of(e.path) for e in entries} | set(made_dirs)):
        current = path
        while True:
            try:
                where.dir(current)
                break
            except FileNotFoundError:
                if not current:
                    break
                current = parent_of(current)
            except OSError as exc:
                shown = show(path)
                return f"the way to {shown} passes {_show_error(exc)}"
    return None


def _show_error(exc: OSError) -> str:
    name = exc.filename if isinstance(exc.filename, bytes) else b""
    what = "a symbolic link" if exc.errno == errno.ELOOP else "something that is not a directory"
    return f"{show(name)}, {what}"


def recover(where: Confined, *, refuse_links: bool) -> Recovery:
    """Undo an interrupted write (see the module doc); the journal goes only if everything worked.

    With ``refuse_links`` (the next run, repairing a killed one) a journal that names any path
    through a symbolic link is refused whole before anything is written; without (the rollback of
    the write that made it, in the same run) every path that can be reached plainly is put back and
    the others are reported as failed."""
    entries, made_dirs = read(where)
    if refuse_links:
        why = through_links(where, entries, made_dirs)
        if why is not None:
            raise UntrustedJournal(why)
    done = Recovery()
    for entry in entries:
        try:
            current = where.lstat(entry.path)
            if entry.original is None:
                # Only a regular file can be one the write created; anything else was there before.
                if current is not None and stat.S_ISREG(current.st_mode):
                    fd, name = where.split(entry.path)
                    os.unlink(name, dir_fd=fd)
                    done.removed.append(entry.path)
                continue
            found = where.read(entry.path)
            if found is None or found != (entry.original, entry.mode):
                restore(where, entry.path, entry.original, entry.mode or 0o644)
                done.restored.append(entry.path)
        except OSError as exc:
            done.failed.append((entry.path, exc.strerror or str(exc)))
    for directory in {parent_of(e.path) for e in entries}:
        remove_temps(where, directory)
    for directory in sorted(made_dirs, key=len, reverse=True):
        with contextlib.suppress(OSError):
            fd, name = where.split(directory)
            os.rmdir(name, dir_fd=fd)
    if not done.failed:
        remove(where)
    return done


def restore(where: Confined, path: bytes, content: bytes, mode: int) -> None:
    """Put ``content`` back at ``path`` through a temporary file and a rename."""
    fd, name = where.split(path)
    temp = write_temp(fd, content, mode)
    try:
        os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=fd)
        raise


def write_temp(dir_fd: int, content: bytes, mode: int, *, sync: bool = False) -> bytes:
    """A new temporary file in the directory ``dir_fd`` (this tool's prefix, so ``remove_temps``
    finds it) holding ``content`` with permissions ``mode``; its name. Removed again if writing it
    fails."""
    fd, temp = _create_temp(dir_fd)
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
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.close(fd)
    return temp


def _create_temp(dir_fd: int) -> tuple[int, bytes]:
    """A new file of our own in the directory ``dir_fd``, opened for writing, as ``tempfile.mkstemp``
    makes one (O_EXCL, mode 0600, no symlink followed, a name nobody else holds), without its 6 ms
    import."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        name = b"%s%d-%s" % (TEMP_PREFIX, os.getpid(), os.urandom(6).hex().encode())
        try:
            return os.open(name, flags, 0o600, dir_fd=dir_fd), name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name")


def remove_temps(where: Confined, directory: bytes) -> None:
    """Remove this tool's temporary files from ``directory`` (debris of an interrupted write); a
    directory that cannot be reached plainly is left alone."""
    with contextlib.suppress(OSError):
        fd = where.dir(directory)
        with os.scandir(fd) as it:
            names = [
                item.name
                for item in it
                if item.name.startswith(os.fsdecode(TEMP_PREFIX))
                and item.is_file(follow_symlinks=False)
            ]
        for name in names:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)


def entries_for(originals: Mapping[bytes, tuple[bytes, int] | None]) -> list[Entry]:
    return [
        Entry(path, None if orig is None else orig[0], None if orig is None else orig[1])
        for path, orig in originals.items()
    ]


def _unb64(text: str) -> bytes:
    return binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
