"""A directory on disk as the engine sees it: safe reads of the touched files, all-or-nothing writes.

``Tree.read`` is the engine's reader: it refuses paths that escape the directory (absolute, ``..``, or
through a symlink pointing outside it) and records what it read, so tests can show that applying a
series reads only the files the patches touch.

``Tree.write`` is all or nothing, even when the process is killed: a journal of every touched file's
original bytes is written into the directory first (``journal.py``, signed with a key kept outside
it), then every new file to a temporary file beside its target, then all are renamed into place,
then the journal is removed. A failure or a signal midway puts every file back from the journal; a
kill leaves the journal, and the next ``apply`` puts the files back before anything else.

Every write, every rollback, and every read made under DIR's lock goes through descriptors of the
directories opened from DIR down with no symbolic link followed (``confined.py``): the paths the engine read are resolved once (a
link inside DIR to a place inside DIR is followed then, as before), and from there on a directory
that became a link fails instead of being written through. Each rename first re-checks that no
directory on the way was swapped since it was opened, and refuses the write if one was.

One run writes to a directory at a time: ``apply`` and ``unapply`` hold an exclusive ``flock`` on
DIR itself from before the journal is looked at until the write is done; ``--dry-run``,
``--check-applied`` and ``status`` hold a shared one. A second run waits up to ``HQP_LOCK_WAIT``
seconds (default 10), then refuses with one line. The lock is on the directory, not on a file in
it, so it leaves nothing behind in an image, and a lock file someone removed cannot let two runs
hold two different locks; only where a directory cannot be locked (NFS) is ``DIR/.hqp-lock`` locked
instead.

``apply_to_tree`` and ``check_applied`` are the two operations ``apply`` runs: parse nothing, place
everything in memory (``engine.apply_series``), then write only if every hunk of every patch applied.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from hyperqwen_patches.display import show
from hyperqwen_patches.engine.applying import (
    Policy,
    PresenceResult,
    SeriesResult,
    verify_applied,
)
from hyperqwen_patches.engine.carried import (
    CarriedResult,
    apply_carried,
    carried_prefix,
    unapply_carried,
)
from hyperqwen_patches.engine.expected import Divergence, Expected, describe, divergences
from hyperqwen_patches.engine.patchmodel import Patch
from hyperqwen_patches.errors import EnvironmentProblem, HqpError, Interrupted, UsageError
from hyperqwen_patches.records import field, record, replace
from hyperqwen_patches.sources import journal
from hyperqwen_patches.sources.confined import Confined, is_plain, parent_of

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from typing import Any


class TreeError(UsageError):
    """A path that is unsafe or unusable in the target directory (escapes it, is a directory, ...)."""


class TreeBusy(EnvironmentProblem):
    """Another run holds the directory's lock, longer than this one waits."""


# How long a run waits for another one to finish with the same directory (seconds).
LOCK_WAIT_ENV = "HQP_LOCK_WAIT"
LOCK_WAIT_DEFAULT = 10.0


class TreeWriteError(HqpError):
    """Writing the changes failed (disk full, permissions); the message says whether every file was
    put back or which ones were not (then the journal keeps them for the next run)."""


class Tree:
    """A directory whose files the engine reads by relative ``bytes`` path."""

    def __init__(self, root: Path) -> None:
        if not root.exists():
            raise UsageError(f"directory {root} does not exist")
        if not root.is_dir():
            raise UsageError(f"{root} is not a directory")
        self.root = root
        self._real_root = os.path.realpath(os.fsencode(root))
        self.reads: list[bytes] = []
        self._dirs: dict[bytes, bytes] = {}
        self._seen: dict[bytes, bytes] = {}
        self.recovered: journal.Recovery | None = None
        self._fd: int | None = None  # DIR, opened while its lock is held
        self._lock: str | None = None  # "shared" or "exclusive" while held
        self._reader: Confined | None = None  # what ``read`` reads through while it is held

    @contextlib.contextmanager
    def locked(self, *, exclusive: bool) -> Iterator[None]:
        """Hold DIR's lock: exclusive for a run that may write (the journal and its recovery
        included), shared for one that only reads. Held already (as strongly): nothing to do."""
        if self._lock == "exclusive" or (self._lock == "shared" and not exclusive):
            yield
            return
        if self._lock is not None:
            raise RuntimeError("a shared lock is never upgraded: the state it read may be stale")
        try:
            fd = os.open(
                self._real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
        except OSError as exc:
            raise TreeError(f"cannot open {self.root}: {exc.strerror}") from None
        lock_file: int | None = None
        try:
            try:
                _flock(fd, exclusive, self.root)
            except OSError as exc:
                if exc.errno not in _NO_DIRECTORY_LOCK:
                    raise TreeError(f"cannot lock {self.root}: {exc.strerror}") from None
                try:
                    lock_file = _lock_file(fd, exclusive, self.root)
                except TreeError:
                    if exclusive:
                        raise
                    # A reader that may not create the lock file (a user's status of a root's
                    # site-packages on NFS) reads unlocked: it writes nothing, and still refuses a
                    # directory that holds a journal.
            self._fd, self._lock = fd, "exclusive" if exclusive else "shared"
            self._reader = Confined(self._real_root, fd)
            try:
                yield
            finally:
                self._reader.close()
                self._fd, self._lock, self._reader = None, None, None
        finally:
            if lock_file is not None:
                os.close(lock_file)
            os.close(fd)  # which releases the lock

    def modes_of(self, moved: Mapping[bytes, bytes]) -> dict[bytes, int]:
        """The git modes of rename and copy sources, for targets that keep them (0755 stays 0755)."""
        out: dict[bytes, int] = {}
        for target, source in moved.items():
            with contextlib.suppress(OSError):
                out[target] = 0o100000 | stat.S_IMODE(os.stat(self.resolve(source)).st_mode)
        return out

    def refuse_if_interrupted(self) -> None:
        """For the commands that promise to write nothing: a directory an interrupted write left
        half done is not read as if it were a state of the series."""
        if journal.exists(self._real_root):
            raise TreeError(
                f"{self.root} holds the journal of an interrupted write "
                f"({show(journal.path_of(self._real_root))}): some files may be half written",
                hint="run apply on it (without --dry-run or --check-applied): it puts every file "
                "back first",
            )

    def resolve(self, path: bytes) -> bytes:
        """The real on-disk path for ``path``; raises TreeError if it would leave the directory."""
        if not path or path.startswith(b"/"):
            raise TreeError(
                f"path {show(path)!r} is absolute or empty: it would escape {self.root}"
            )
        if any(part == b".." for part in path.split(b"/")):
            raise TreeError(f"path {show(path)!r} contains '..': it would escape {self.root}")
        real = self._unresolved(path)
        if os.path.islink(real):
            real = os.path.realpath(real)
        if real != self._real_root and not real.startswith(self._real_root + b"/"):
            raise TreeError(
                f"path {show(path)!r} resolves to {show(real)}, outside {self.root} "
                "(through a symlink)",
                hint="patches may only touch files inside the target directory",
            )
        return real

    def read(self, path: bytes) -> bytes | None:
        """Current bytes of ``path`` or None when it does not exist (the engine's reader).

        While DIR's lock is held (every command reads so) the file is read through the directories
        opened from DIR down, no link followed: a directory swapped for a link after ``resolve``
        makes the read fail, never read a file outside DIR."""
        real = self.resolve(path)
        self.reads.append(path)
        if self._reader is not None:
            return self._read_confined(path, real)
        try:
            info = os.stat(real)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise TreeError(f"cannot read {show(path)} in {self.root}: {exc.strerror}") from None
        if stat.S_ISDIR(info.st_mode):
            raise TreeError(f"{show(path)} is a directory in {self.root}, not a file")
        if not stat.S_ISREG(info.st_mode):
            # A FIFO would block the read forever, a device be read until memory runs out.
            raise TreeError(
                f"{show(path)} in {self.root} is not a regular file (GNU patch: can't patch it)"
            )
        try:
            with open(real, "rb") as handle:
                content = handle.read()
            self._seen[path] = content  # kept to restore the file if a later write fails
            return content
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None
        except IsADirectoryError:
            raise TreeError(f"{show(path)} is a directory in {self.root}, not a file") from None
        except OSError as exc:
            raise TreeError(f"cannot read {show(path)} in {self.root}: {exc.strerror}") from None

    def _read_confined(self, path: bytes, real: bytes) -> bytes | None:
        assert self._reader is not None
        rel = real[len(self._real_root) + 1 :]
        try:
            if not is_plain(rel):
                raise IsADirectoryError(errno.EISDIR, "is a directory")
            found = self._reader.read(rel)
        except IsADirectoryError:
            raise TreeError(f"{show(path)} is a directory in {self.root}, not a file") from None
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                # A FIFO would block the read forever, a device be read until memory runs out.
                raise TreeError(
                    f"{show(path)} in {self.root} is not a regular file (GNU patch: can't patch it)"
                ) from None
            raise TreeError(f"cannot read {show(path)} in {self.root}: {exc.strerror}") from None
        if found is None:
            return None
        self._seen[path] = found[0]  # kept to restore the file if a later write fails
        return found[0]

    def write(
        self, changes: Mapping[bytes, bytes | None], modes: Mapping[bytes, int] | None = None
    ) -> list[bytes]:
        """Write ``changes`` (None = delete) all or nothing; returns the paths changed, sorted.

        The journal first (the originals: the engine read them all before deciding), then phase 1
        writes every new content to a temporary file beside its target (nothing visible yet), phase
        2 renames each into place (atomic per file) and removes deletions, then the journal goes. On
        an error or a signal (SIGINT, SIGTERM, SIGHUP) the directory is put back from the journal
        (``journal.recover``, the same code that repairs a killed run) before the error is raised.
        """
        with self.locked(exclusive=True):
            self.recover_interrupted(strict=True)
            plan = [(path, self._relative(path), changes[path]) for path in sorted(changes)]
            for path, _rel, content in plan:
                if content is None and os.path.islink(self._unresolved(path)):
                    raise TreeError(
                        f"{show(path)} is a symbolic link in {self.root}: deleting it would delete "
                        "what it points to (GNU patch refuses too)"
                    )
            key = _signing_key()
            where = Confined(self._real_root, self._fd)
            try:
                return self._write(where, key, plan, modes or {})
            finally:
                where.close()

    def _write(
        self,
        where: Confined,
        key: bytes,
        plan: list[tuple[bytes, bytes, bytes | None]],
        modes: Mapping[bytes, int],
    ) -> list[bytes]:
        current = journal.JOURNAL  # what the step under way writes, to name it if it fails
        temps: dict[bytes, bytes] = {}  # target -> its temporary's name, in the target's directory
        journaled = False
        renamed = False  # every rename done: from here on the write is whole
        try:
            with _signals_raise():
                originals: dict[bytes, tuple[bytes, int] | None] = {}
                for path, rel, _content in plan:
                    current = rel
                    originals[rel] = self._original(where, path, rel)
                try:
                    made = where.missing({parent_of(rel) for _p, rel, c in plan if c is not None})
                except OSError as exc:  # a file or a link where a directory must be: name it
                    current = exc.filename if isinstance(exc.filename, bytes) else b""
                    raise
                current = journal.JOURNAL
                journal.write(where, key, journal.entries_for(originals), made)
                journaled = True
                for directory in made:
                    current = directory
                    where.mkdir(directory)
                for _path, rel, _content in plan:
                    current = rel
                    where.dir(parent_of(rel))  # opened here: the writer threads only look it up
                jobs = [
                    (
                        rel,
                        content,
                        _mode_for(o[1] if (o := originals[rel]) else None, modes.get(path)),
                    )
                    for path, rel, content in plan
                    if content is not None
                ]
                failed = _write_temps(where, jobs, temps)
                if failed is not None:
                    current = failed[0]
                    raise failed[1]

                def put(job: tuple[bytes, bytes | None]) -> None:
                    rel, content = job
                    if not where.unchanged(parent_of(rel)):
                        raise OSError(
                            0, "a directory on the way was replaced by a symlink during the write"
                        )
                    fd, name = where.split(rel)
                    if content is None:
                        if originals[rel] is not None:
                            os.unlink(name, dir_fd=fd)
                    else:
                        os.rename(temps[rel], name, src_dir_fd=fd, dst_dir_fd=fd)

                failed = _each([(rel, content) for _p, rel, content in plan], put)
                if failed is not None:
                    current = failed[0]
                    raise failed[1]
                renamed = True
                journal.remove(where)  # the commit point
        except OSError as exc:
            raise TreeWriteError(
                f"writing to {self.root} failed ({exc.strerror or exc}: "
                f"{show(os.path.join(self._real_root, current))}); "
                + self._put_back(where, temps, journaled)
            ) from None
        except (KeyboardInterrupt, _Signalled) as exc:
            signame = exc.name if isinstance(exc, _Signalled) else "SIGINT"
            if renamed and not journal.exists(where):
                # The signal came after the commit point: the write is whole, nothing to put back.
                raise Interrupted(
                    f"interrupted by {signame} after writing to {self.root}: every file was written",
                    signal=signame,
                ) from None
            raise Interrupted(
                f"interrupted by {signame} while writing to {self.root}; "
                + self._put_back(where, temps, journaled),
                signal=signame,
            ) from None
        except BaseException:
            if not (renamed and not journal.exists(where)):
                self._put_back(where, temps, journaled)
            raise
        for _path, rel, content in plan:
            if content is None:
                _remove_empty_parents(where, rel)
        return [path for path, _rel, _content in plan]

    def _relative(self, path: bytes) -> bytes:
        """``path``'s place under DIR's real path: resolved (``resolve``), so the write walks it
        from DIR with no link to follow."""
        real = self.resolve(path)
        rel = real[len(self._real_root) + 1 :]
        if not is_plain(rel):
            raise TreeError(f"path {show(path)!r} names {self.root} itself, not a file in it")
        return rel

    def _original(self, where: Confined, path: bytes, rel: bytes) -> tuple[bytes, int] | None:
        """The bytes and permission bits to put back at ``rel`` if the write fails; None if no file
        is there. A directory there is left to fail at its rename, which names it."""
        info = where.lstat(rel)
        if info is None or stat.S_ISDIR(info.st_mode):
            return None
        if stat.S_ISLNK(info.st_mode):
            raise OSError(errno.ELOOP, "it became a symbolic link after it was read")
        seen = self._seen.get(path)
        if seen is not None and stat.S_ISREG(info.st_mode):
            return seen, stat.S_IMODE(info.st_mode)
        return where.read(rel)

    def recover_interrupted(self, *, strict: bool = False) -> journal.Recovery | None:
        """Undo an earlier write that was killed midway (its journal is still here); None if none.

        A journal that is not ours, or that names a path through a symbolic link, is refused whole
        (TreeError, exit 2), nothing written. With ``strict`` (a write is about to start) a
        recovery that cannot finish is an error."""
        with self.locked(exclusive=True):
            where = Confined(self._real_root, self._fd)
            try:
                if not journal.exists(where):
                    # A run killed while it wrote the journal itself left only its temporary file.
                    journal.remove_temps(where, b"")
                    return None
                try:
                    with _signals_blocked():
                        done = journal.recover(where, refuse_links=True)
                except journal.UntrustedJournal as exc:
                    shown = show(journal.path_of(self._real_root))
                    raise TreeError(
                        f"refusing the write journal {shown}: {exc}; nothing was written",
                        hint=f"a journal can be planted by anyone who can write to {self.root}: "
                        "inspect it (JSON, after a signature line if it has one) and the files it "
                        f"names, reinstall the package if they are damaged, then remove {shown}",
                    ) from None
                except OSError as exc:
                    raise TreeWriteError(
                        f"{self.root} holds the journal of an interrupted write that cannot be "
                        f"read: {exc.strerror}",
                        hint=f"restore the directory from the package (reinstall it), then remove "
                        f"{show(journal.path_of(self._real_root))}",
                    ) from None
            finally:
                where.close()
        self.recovered = done
        if done.failed and strict:
            raise TreeWriteError(self._failed_text(done))
        return done

    def _put_back(self, where: Confined, temps: Mapping[bytes, bytes], journaled: bool) -> str:
        """Roll back from the journal; the text says what is now on disk (never a guess)."""
        with _signals_blocked():
            # Our temporaries first, through the descriptors they were made in: one in a directory
            # swapped away meanwhile is still ours, and a walk from DIR no longer reaches it.
            for rel, temp in temps.items():
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=where.dir(parent_of(rel)))
            # The rest as after a kill: walked afresh from DIR, so a directory that is a link now
            # is not written through (what it held is reported instead).
            fresh = Confined(self._real_root, self._fd)
            try:
                if not journal.exists(fresh):
                    journal.remove_temps(fresh, b"")
                    if journaled:
                        return (
                            f"its journal {show(journal.path_of(self._real_root))} was removed "
                            "meanwhile (by another program): files may be half written; "
                            "reinstall the package"
                        )
                    return "nothing was changed"  # stopped before the journal was in place
                try:
                    done = journal.recover(fresh, refuse_links=False)
                except (OSError, journal.UntrustedJournal) as exc:
                    return f"putting it back failed ({exc}); run apply again to finish"
            finally:
                fresh.close()
        if done.failed:
            return self._failed_text(done)
        return "nothing was changed (every file was put back)"

    def _failed_text(self, done: journal.Recovery) -> str:
        shown = ", ".join(f"{show(p)} ({why})" for p, why in done.failed[:5])
        more = f" and {len(done.failed) - 5} more" if len(done.failed) > 5 else ""
        return (
            f"putting back {len(done.failed)} files failed: {shown}{more}; they may still be "
            f"patched; the journal {show(journal.path_of(self._real_root))} keeps their "
            "originals: run apply again to finish putting them back"
        )

    def _unresolved(self, path: bytes) -> bytes:
        """``path`` with its directories resolved but not its last component (which may be a link)."""
        parent, _, name = path.rpartition(b"/")
        return os.path.join(self._real_dir(parent), name)

    def _real_dir(self, parent: bytes) -> bytes:
        """The real path of directory ``parent`` (relative to the root; it may not exist yet).

        Cached per directory, and built from its own parent's: one ``lstat`` for a directory whose
        parent is known, where ``realpath`` walks every component from ``/`` (a series touches many
        files per directory, and many directories under one)."""
        real = self._dirs.get(parent)
        if real is None:
            if not parent or parent == b".":
                real = self._real_root
            else:
                up, _, name = parent.rpartition(b"/")
                real = self._real_dir(up)
                if name and name != b".":
                    real = os.path.join(real, name)
                    if os.path.islink(real):
                        # realpath follows every symlink on the way, including ones not yet
                        # created at the tail (a link to a directory a write will create)
                        real = os.path.realpath(real)
            self._dirs[parent] = real
        return real


def _remove_empty_parents(where: Confined, rel: bytes) -> None:
    """After a deletion, remove the directories it left empty, as GNU patch does."""
    parent = parent_of(rel)
    while parent:
        up, _, name = parent.rpartition(b"/")
        try:
            os.rmdir(name, dir_fd=where.dir(up))
        except OSError:
            return  # not empty (or not ours to remove): stop climbing
        parent = up


def _signing_key() -> bytes:
    """The key the journal is signed with, made on first use; before anything is written, a cache
    that cannot keep it is said plainly (a journal we could not verify later is no journal)."""
    try:
        key = journal.signing_key(create=True)
    except OSError as exc:
        name = exc.filename if isinstance(exc.filename, bytes) else os.fsencode(exc.filename or "")
        raise EnvironmentProblem(
            f"cannot keep the key that signs the write journal ({exc.strerror}: {show(name)})",
            hint="set HQP_CACHE to a directory this user can write (the key is kept in its keys/)",
        ) from None
    assert key is not None
    return key


# NFS emulates flock with byte-range locks, and an exclusive one needs a descriptor open for
# writing, which a directory's cannot be (EBADF); other file systems may lack locks on directories.
_NO_DIRECTORY_LOCK = {errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL}
LOCK_FILE = b".hqp-lock"


def _lock_file(dir_fd: int, exclusive: bool, root: Path) -> int:
    """Where DIR itself cannot be locked: lock ``DIR/.hqp-lock`` instead, opened for writing. It is
    left in place: removing a lock file races the next run, which may have it open already."""
    try:
        fd = os.open(
            LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd
        )
    except OSError as exc:
        raise TreeError(f"cannot lock {root}: {exc.strerror}") from None
    try:
        _flock(fd, exclusive, root)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _flock(fd: int, exclusive: bool, root: Path) -> None:
    """Take the lock on ``fd``, waiting up to ``HQP_LOCK_WAIT`` seconds for another run."""
    from hyperqwen_patches import flocks

    raw = os.environ.get(LOCK_WAIT_ENV)
    try:
        wait = LOCK_WAIT_DEFAULT if raw is None else float(raw)
    except ValueError:
        raise UsageError(f"{LOCK_WAIT_ENV}={raw!r} is not a number of seconds") from None

    def busy() -> TreeBusy:
        return TreeBusy(
            f"another run holds the lock on {root} (one apply or unapply writes to a "
            f"directory at a time); gave up after waiting {wait:g} s",
            hint=f"let it finish and run again; {LOCK_WAIT_ENV}=SECONDS waits longer",
        )

    flocks.take(fd, shared=not exclusive, wait=wait, busy=busy)


# Creating a file costs 0.3 ms of kernel time on these machines, whoever does it; a few threads
# overlap that (100 files: 36 -> 22 ms with two). Below this many files one thread is as fast.
PARALLEL_WRITES_FROM = 16


def _write_temps(
    where: Confined, jobs: Sequence[tuple[bytes, bytes, int]], temps: dict[bytes, bytes]
) -> tuple[bytes, BaseException] | None:
    """Write each (target, content, mode) to a temporary file beside its target, recording it in
    ``temps`` (target -> temporary name) as soon as it exists; the first failure (its target and
    error) if any."""

    def write(job: tuple[bytes, bytes, int]) -> None:
        rel, content, mode = job
        temps[rel] = journal.write_temp(where.dir(parent_of(rel)), content, mode)

    return _each(jobs, write)


def _each(
    jobs: Sequence[tuple[Any, ...]], fn: Callable[[Any], None]
) -> tuple[bytes, BaseException] | None:
    """Run ``fn`` on every job (``job[0]`` names its target), in up to four threads from
    PARALLEL_WRITES_FROM jobs on; returns the first failure (target, error), after every thread has
    stopped, so a rollback never races a write. A signal that interrupts the wait stops the threads,
    waits for them with signals blocked, and is raised then."""
    workers = min(4, os.cpu_count() or 1, len(jobs) // (PARALLEL_WRITES_FROM // 2) or 1)
    if len(jobs) < PARALLEL_WRITES_FROM or workers < 2:
        for job in jobs:
            try:
                fn(job)
            except OSError as exc:
                return job[0], exc
        return None
    import threading

    failures: list[tuple[bytes, BaseException]] = []
    order = iter(jobs)  # next() on a list iterator is atomic under the GIL
    stop = threading.Event()
    # Waited on instead of Thread.join: a join that Ctrl-C interrupts marks a thread that is still
    # running as stopped (CPython 3.11, bpo-45274's fix), so a second join returned at once and
    # the rollback raced the writers (seen: the temporaries' table changed under it).
    finished = [threading.Event() for _ in range(workers)]

    def work(done: threading.Event) -> None:
        # The main thread alone takes the signals (it raises them and runs the rollback): one
        # delivered to a writer would run its handler in the main thread even while the main
        # thread blocks them.
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            for job in order:
                if stop.is_set():
                    return
                try:
                    fn(job)
                except BaseException as exc:
                    failures.append((job[0], exc))
                    stop.set()
                    return
        finally:
            done.set()

    threads = [threading.Thread(target=work, args=(done,), daemon=True) for done in finished]
    try:  # a signal may land while the threads start, as well as while they run
        for t in threads:
            t.start()
        for done in finished:
            done.wait()
    except BaseException:
        stop.set()
        with _signals_blocked():
            for t, done in zip(threads, finished, strict=True):
                if t.ident is not None:  # started: it runs work(), which sets done
                    done.wait()
        raise
    return failures[0] if failures else None


def _mode_for(existing: int | None, wanted: int | None) -> int:
    """Keep an existing file's permissions; a git mode (100755) picks them; new files get 0644.

    Setuid, setgid and sticky bits are dropped, as GNU patch and git drop them: new bytes in a
    setuid program are not a program anyone vetted as setuid."""
    if wanted is not None:
        return 0o755 if wanted & 0o111 else 0o644
    return existing & 0o777 if existing is not None else 0o644


_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class _Signalled(BaseException):
    """SIGTERM or SIGHUP during a write: raised in the main thread so the rollback runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.name = signal.Signals(signum).name


def _in_main_thread() -> bool:
    """Signal handlers can be set in the main thread only. Without ``threading`` imported no other
    thread was started through it (its 1-2 ms import is spared a write of a few files)."""
    threading = sys.modules.get("threading")
    return threading is None or threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While files are being replaced, SIGTERM (what ``timeout`` and ``docker stop`` send) and
    SIGHUP interrupt like Ctrl-C does, so the write is undone instead of stopping half done."""
    if not _in_main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise _Signalled(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """A rollback is not itself interrupted (a second Ctrl-C would leave it half done)."""
    if not _in_main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@record(slots=True)
class TreeApplyResult:
    """What ``apply`` did to a directory: the engine's result and the files written (if any)."""

    root: Path
    series: SeriesResult
    dry_run: bool
    written: list[bytes] = field(default_factory=list)
    reads: list[bytes] = field(default_factory=list)
    carried: int = 0  # leading rows DIR carried already (engine/carried.py)
    refused: str | None = None  # why DIR's state was refused: rows carried out of order, or partly
    recovered: journal.Recovery | None = None  # an interrupted earlier write, undone first
    divergent: list[Divergence] = field(default_factory=list)  # files unlike release + rows

    @property
    def ok(self) -> bool:
        return self.series.ok


def apply_to_tree(
    root: Path, patches: Sequence[Patch], policy: Policy, *, dry_run: bool = False
) -> TreeApplyResult:
    """Place every hunk of every patch in memory; write only when all applied (and not a dry run).

    A tree that already carries the first rows of the series gets the rest; one that carries all of it
    is left alone (``engine/carried.py``)."""
    return _carry(root, patches, policy, dry_run, apply_carried)


def unapply_tree(
    root: Path,
    patches: Sequence[Patch],
    policy: Policy,
    *,
    dry_run: bool = False,
    keep: int = 0,
    expected: Expected | None = None,
) -> TreeApplyResult:
    """Take the rows ``root`` carries out again down to row ``keep``, all or nothing (journaled like
    ``apply_to_tree``).

    With ``expected`` (the release plus the series, ``engine/expected.py``), a tree whose touched
    files hold anything but the release plus the rows it carries is refused, nothing written: taking
    the rows out would not give the release (or rows 1..keep) back."""

    def plan(
        ps: Sequence[Patch], read: Callable[[bytes], bytes | None], pol: Policy
    ) -> CarriedResult:
        outcome = unapply_carried(ps, read, pol, keep=keep)
        if expected is None or outcome.refused is not None:
            return outcome
        found = divergences(expected, outcome.carried, read)
        if found:
            return replace(
                outcome,
                series=replace(outcome.series, changes={}, modes={}, moved={}),
                refused=describe(found),
                divergent=found,
            )
        return outcome

    return _carry(root, patches, policy, dry_run, plan)


def _carry(
    root: Path,
    patches: Sequence[Patch],
    policy: Policy,
    dry_run: bool,
    plan: Callable[[Sequence[Patch], Callable[[bytes], bytes | None], Policy], CarriedResult],
) -> TreeApplyResult:
    """The directory side of both: repair an interrupted write, plan in memory, write all or nothing."""
    tree = Tree(root)
    # Held from before the journal is looked at until the write is done: a second run waits, then
    # reads what this one left (already applied), never a half-written tree or a live journal.
    with tree.locked(exclusive=not dry_run):
        if dry_run:
            tree.refuse_if_interrupted()
        else:
            tree.recover_interrupted(strict=True)
        outcome = plan(patches, tree.read, policy)
        series = outcome.series
        written: list[bytes] = []
        if series.ok and not dry_run and series.changes:
            written = tree.write(series.changes, {**tree.modes_of(series.moved), **series.modes})
    return TreeApplyResult(
        root=root,
        series=series,
        dry_run=dry_run,
        written=written,
        reads=list(tree.reads),
        carried=outcome.carried,
        refused=outcome.refused,
        recovered=tree.recovered,
        divergent=outcome.divergent,
    )


@record(slots=True)
class TreeCheckResult:
    """``apply --check-applied``: does the directory carry each patch?"""

    root: Path
    patches: list[PresenceResult]
    # The touched files whose bytes are not the release plus the rows carried (None: not compared,
    # no release to compare with or the rows are not a prefix of the series).
    divergent: list[Divergence] | None = None

    @property
    def ok(self) -> bool:
        return all(p.status == "present" for p in self.patches) and not self.divergent


def check_applied(
    root: Path, patches: Sequence[Patch], policy: Policy, expected: Expected | None = None
) -> TreeCheckResult:
    """Verify, in memory and read-only, that ``root`` already carries every patch; with
    ``expected``, also that every file the series touches holds the release plus the rows carried
    (``engine/expected.py``), file by file."""
    tree = Tree(root)
    with tree.locked(exclusive=False):
        tree.refuse_if_interrupted()
        presence = verify_applied(patches, tree.read, policy)
        found = None
        carried = carried_prefix(presence)
        if expected is not None and carried is not None:
            found = divergences(expected, carried, tree.read)
        return TreeCheckResult(root=root, patches=presence, divergent=found)


@record(frozen=True)
class Misplaced:
    """Why DIR is not the directory the patches apply in, and the one beside it they fit, if any."""

    reason: str
    instead: Path | None  # DIR's parent or one of its subdirectories, when exactly one fits best
    found: int = 0  # how many of the edited files ``instead`` holds
    edited: int = 0  # how many files the patches edit


def misplaced(root: Path, patches: Sequence[Patch]) -> Misplaced | None:
    """Why ``root`` cannot be the directory the patches apply in, or None.

    A series edits existing files; when not one of the top-level entries those files live under
    exists in ``root`` (a venv root given for its site-packages), every hunk would fail, and 17
    "file not found" errors hide the one mistake. The directory to give instead is looked for one
    level up and one level down (package-relative patches ``a/v1/...`` given a release root that
    holds ``vllm/``, root-relative ``a/vllm/...`` given ``site-packages/vllm``): the one holding the
    most of the edited files, named only when no other holds as many, so the hint is never a guess.
    """
    if not root.is_dir():
        return Misplaced("it is not a directory" if root.exists() else "it does not exist", None)
    edited = sorted(
        {fp.old_path for patch in patches for fp in patch.files if fp.old_path is not None}
    )
    if not edited or _fits(root, edited):
        return None
    tops = sorted({p.split(b"/", 1)[0] + (b"/" if b"/" in p else b"") for p in edited})
    names = ", ".join(show(t) for t in tops[:6])
    names += f" and {len(tops) - 6} more" if len(tops) > 6 else ""
    reason = f"the patches edit files under {names} and {root} has none of them"
    if all(t.endswith(b"/") for t in tops):
        reason = f"the patches edit files under {names} and {root} has no such directory"
    scores = sorted(((_holds(d, edited), str(d)) for d in _neighbours(root)), reverse=True)
    if scores and scores[0][0] > 0 and (len(scores) == 1 or scores[1][0] < scores[0][0]):
        return Misplaced(reason, Path(scores[0][1]), scores[0][0], len(edited))
    return Misplaced(reason, None, 0, len(edited))


def _fits(root: Path, edited: Sequence[bytes]) -> bool:
    base = os.fsencode(root)
    for path in edited:
        top, slash, _rest = path.partition(b"/")
        if (
            os.path.isdir(os.path.join(base, top))
            if slash
            else os.path.isfile(os.path.join(base, top))
        ):
            return True
    return False


def _holds(directory: Path, edited: Sequence[bytes]) -> int:
    base = os.fsencode(directory)
    return sum(os.path.isfile(os.path.join(base, p)) for p in edited)


def _neighbours(root: Path) -> list[Path]:
    """``root``'s parent and its subdirectories (not hidden ones), where the patches may fit."""
    out = [root.resolve().parent] if root.resolve().parent != root.resolve() else []
    with contextlib.suppress(OSError):
        out += sorted(
            Path(e.path)
            for e in os.scandir(root)
            if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
        )
    return out
