"""A directory walked from DIR down, one component at a time, no symbolic link followed.

Everything ``apply`` writes, everything its rollback puts back or removes, and what it reads under
DIR's lock goes through here: each file is created, renamed, read and removed relative to a
descriptor of its directory, and each directory's descriptor was opened from its parent's with
``O_NOFOLLOW | O_DIRECTORY``, as GNU patch opens them (``safe.c``). A component that is, or has
meanwhile become, a symbolic link fails with ELOOP instead of being followed, so no write lands
outside DIR however its paths were named, planted in a journal, or swapped while the write ran.

Paths are relative to DIR's real path, ``/``-separated, without empty, ``.`` or ``..`` components.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parent_of(path: bytes) -> bytes:
    """The directory part of a relative path (``b""`` for DIR itself)."""
    return path.rpartition(b"/")[0]


def is_plain(path: bytes) -> bool:
    """Whether ``path`` is relative, non-empty and names no empty, ``.`` or ``..`` component."""
    return (
        bool(path)
        and not path.startswith(b"/")
        and all(part not in (b"", b".", b"..") for part in path.split(b"/"))
    )


# Descriptors are numbered lowest free first, so a directory's number says about how many are open;
# below this no soft limit in use (1,024 at the least) is near, and the limit is not even looked up.
_CHECK_LIMIT_FROM = 900
_ROOM = 100  # kept free beyond the directories held: temporaries, the journal, the interpreter's


def _keep_room(fd: int) -> None:
    """One descriptor is kept per directory a write or its reads touch; a series touching files in
    about a thousand directories would run out at a common soft limit (1,024) midway. Raise the
    soft limit to the hard one before that; where it cannot rise the open fails as it would have."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or fd + _ROOM < soft or soft == hard:
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _is_link(name: bytes, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class Confined:
    """Descriptors of DIR and of the directories under it that were reached, cached by path.

    ``root`` is DIR's real path (what the journal's signature binds, and what messages show);
    ``root_fd`` an open descriptor of DIR to borrow (the one its lock is held on), or None to open
    one (closed with the rest)."""

    def __init__(self, root: bytes, root_fd: int | None = None) -> None:
        self.root = root
        self._owned = root_fd is None
        self.fd = os.open(root, _DIR_FLAGS) if root_fd is None else root_fd
        self._fds: dict[bytes, int] = {b"": self.fd}
        self._ids: dict[bytes, tuple[int, int]] = {}

    def close(self) -> None:
        for path, fd in self._fds.items():
            if path or self._owned:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fds = {}

    def __enter__(self) -> Confined:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def dir(self, path: bytes) -> int:
        """The descriptor of directory ``path`` (``b""``: DIR). OSError if a component is missing
        (ENOENT), a symbolic link (ELOOP) or not a directory (ENOTDIR).

        Safe from several threads: two that open the same directory at once keep one descriptor."""
        fd = self._fds.get(path)
        if fd is not None:
            return fd
        if not path:
            raise OSError(errno.EBADF, "used after it was closed", self.root)
        up, _, name = path.rpartition(b"/")
        parent = self.dir(up)
        if name in (b"", b".", b".."):
            raise OSError(errno.EINVAL, "not a plain relative path", path)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            # O_DIRECTORY | O_NOFOLLOW on a link says ENOTDIR on Linux: tell the two apart.
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(name, parent):
                raise OSError(
                    errno.ELOOP, "a directory on the way is a symbolic link", path
                ) from None
            raise OSError(exc.errno, exc.strerror, path) from None
        if fd >= _CHECK_LIMIT_FROM:
            _keep_room(fd)
        info = os.fstat(fd)
        kept = self._fds.setdefault(path, fd)
        if kept != fd:
            os.close(fd)
        else:
            self._ids[path] = (info.st_dev, info.st_ino)
        return kept

    def split(self, path: bytes) -> tuple[int, bytes]:
        """(descriptor of the directory, name in it) for the file ``path``."""
        up, _, name = path.rpartition(b"/")
        return self.dir(up), name

    def lstat(self, path: bytes) -> os.stat_result | None:
        """``path``'s own status (a link is not followed); None when it or a directory on the way
        does not exist."""
        try:
            fd, name = self.split(path)
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read(self, path: bytes) -> tuple[bytes, int] | None:
        """A regular file's bytes and permission bits; None if absent; OSError if something else
        is there (a link is not followed: ELOOP)."""
        try:
            fd, name = self.split(path)
            handle = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd
            )
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            info = os.fstat(handle)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            chunks = []
            while chunk := os.read(handle, max(info.st_size, 1 << 16)):
                chunks.append(chunk)
            return b"".join(chunks), stat.S_IMODE(info.st_mode)
        finally:
            os.close(handle)

    def missing(self, dirs: set[bytes]) -> list[bytes]:
        """Of the directories ``dirs`` (and their parents), those that do not exist, outermost
        first. A component in the way that is a file or a link is an OSError here, before anything
        is written."""
        out: set[bytes] = set()
        for path in dirs:
            current = path
            while current and current not in out:
                try:
                    self.dir(current)
                    break
                except FileNotFoundError:
                    out.add(current)
                    current = parent_of(current)
        return sorted(out, key=lambda d: (d.count(b"/"), d))

    def mkdir(self, path: bytes) -> None:
        fd, name = self.split(path)
        os.mkdir(name, 0o777, dir_fd=fd)

    def unchanged(self, path: bytes) -> bool:
        """Whether every directory from DIR down to ``path`` is still the one it was when it was
        opened: none was replaced by a symbolic link (or moved away) since. The write checks it
        before each rename; the rename itself, relative to the opened directory, could not land
        elsewhere anyway, but a tree changed under a write is not one to report written."""
        current = path
        while current:
            up, _, name = current.rpartition(b"/")
            want = self._ids.get(current)
            if want is None:
                return False
            try:
                info = os.stat(name, dir_fd=self._fds[up], follow_symlinks=False)
            except OSError:
                return False
            if not stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) != want:
                return False
            current = up
        return True
