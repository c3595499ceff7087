"""A directory on disk as the engine sees it: safe reads of the touched files, all-or-nothing writes.

``Tree.read`` is the engine's reader: it refuses paths that escape the directory (absolute, ``..``, or
through a symlink pointing outside it) and records what it read, so tests can show that applying a
series reads only the files the patches touch.

``Tree.write`` is all or nothing, even when the process is killed: a journal of every touched file's
original bytes is written into the directory first (``journal.py``), then every new file to a temporary
file beside its target, then all are renamed into place, then the journal is removed. A failure or a
signal midway puts every file back from the journal; a kill leaves the journal, and the next ``apply``
puts the files back before anything else. Each rename re-checks that no directory on the way was
swapped for a symlink since the paths were resolved.

``apply_to_tree`` and ``check_applied`` are the two operations ``apply`` runs: parse nothing, place
everything in memory (``engine.apply_series``), then write only if every hunk of every patch applied.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from hyperqwen_patches.engine.applying import (
    Policy,
    PresenceResult,
    SeriesResult,
    verify_applied,
)
from hyperqwen_patches.engine.carried import CarriedResult, apply_carried, unapply_carried
from hyperqwen_patches.engine.patchset import Patch
from hyperqwen_patches.errors import HqpError, Interrupted, UsageError
from hyperqwen_patches.records import field, record
from hyperqwen_patches.sources import journal

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from typing import Any


class TreeError(UsageError):
    """A path that is unsafe or unusable in the target directory (escapes it, is a directory, ...)."""


class TreeWriteError(HqpError):
    """Writing the changes failed (disk full, permissions); the message says whether every file was
    put back or which ones were not (then the journal keeps them for the next run)."""


def _show(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")


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
                f"({_show(journal.path_of(self._real_root))}): some files may be half written",
                hint="run apply on it (without --dry-run or --check-applied): it puts every file "
                "back first",
            )

    def resolve(self, path: bytes) -> bytes:
        """The real on-disk path for ``path``; raises TreeError if it would leave the directory."""
        if not path or path.startswith(b"/"):
            raise TreeError(
                f"path {_show(path)!r} is absolute or empty: it would escape {self.root}"
            )
        if any(part == b".." for part in path.split(b"/")):
            raise TreeError(f"path {_show(path)!r} contains '..': it would escape {self.root}")
        real = self._unresolved(path)
        if os.path.islink(real):
            real = os.path.realpath(real)
        if real != self._real_root and not real.startswith(self._real_root + b"/"):
            raise TreeError(
                f"path {_show(path)!r} resolves to {_show(real)}, outside {self.root} "
                "(through a symlink)",
                hint="patches may only touch files inside the target directory",
            )
        return real

    def read(self, path: bytes) -> bytes | None:
        """Current bytes of ``path`` or None when it does not exist (the engine's reader)."""
        real = self.resolve(path)
        self.reads.append(path)
        try:
            info = os.stat(real)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise TreeError(f"cannot read {_show(path)} in {self.root}: {exc.strerror}") from None
        if stat.S_ISDIR(info.st_mode):
            raise TreeError(f"{_show(path)} is a directory in {self.root}, not a file")
        if not stat.S_ISREG(info.st_mode):
            # A FIFO would block the read forever, a device be read until memory runs out.
            raise TreeError(
                f"{_show(path)} in {self.root} is not a regular file (GNU patch: can't patch it)"
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
            raise TreeError(f"{_show(path)} is a directory in {self.root}, not a file") from None
        except OSError as exc:
            raise TreeError(f"cannot read {_show(path)} in {self.root}: {exc.strerror}") from None

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
        self.recover_interrupted(strict=True)
        modes = modes or {}
        plan = [(path, self.resolve(path), changes[path]) for path in sorted(changes)]
        originals: dict[bytes, tuple[bytes, int] | None] = {}
        for path, real, content in plan:
            if content is None and os.path.islink(self._unresolved(path)):
                raise TreeError(
                    f"{_show(path)} is a symbolic link in {self.root}: deleting it would delete "
                    "what it points to (GNU patch refuses too)"
                )
            seen = self._seen.get(path)
            if seen is None:
                originals[real] = _snapshot_file(real)
            else:
                try:
                    originals[real] = (seen, stat.S_IMODE(os.stat(real).st_mode))
                except (FileNotFoundError, NotADirectoryError):
                    originals[real] = None
        new_dirs = _missing_dirs(os.path.dirname(real) for _p, real, c in plan if c is not None)
        root = self._real_root
        current = journal.path_of(root)
        renamed = False  # every rename done: from here on the write is whole
        try:
            with _signals_raise():
                journal.write(root, journal.entries_for(root, originals), new_dirs)
                for directory in new_dirs:
                    current = directory
                    os.mkdir(directory)
                jobs = [
                    (
                        real,
                        content,
                        _mode_for(o[1] if (o := originals[real]) else None, modes.get(path)),
                    )
                    for path, real, content in plan
                    if content is not None
                ]
                temps, failed = _write_temps(jobs)  # real target -> temp
                if failed is not None:
                    current = failed[0]
                    raise failed[1]

                def put(job: tuple[bytes, bytes | None]) -> None:
                    real, content = job
                    self._recheck(real)
                    if content is None:
                        if originals[real] is not None:
                            os.unlink(real)
                    else:
                        os.replace(temps[real], real)

                failed = _each([(real, content) for _p, real, content in plan], put)
                if failed is not None:
                    current = failed[0]
                    raise failed[1]
                renamed = True
                journal.remove(root)  # the commit point
        except OSError as exc:
            # A failed rename reports our temporary as its filename: name the target instead.
            named = exc.filename2 or exc.filename
            temp = named and os.path.basename(os.fsencode(named)).startswith(journal.TEMP_PREFIX)
            name = _show(os.fsencode(named)) if named and not temp else _show(current)
            raise TreeWriteError(
                f"writing to {self.root} failed ({exc.strerror}: {name}); " + self._put_back()
            ) from None
        except (KeyboardInterrupt, _Signalled) as exc:
            signame = exc.name if isinstance(exc, _Signalled) else "SIGINT"
            if renamed and not journal.exists(root):
                # The signal came after the commit point: the write is whole, nothing to put back.
                raise Interrupted(
                    f"interrupted by {signame} after writing to {self.root}: every file was written",
                    signal=signame,
                ) from None
            raise Interrupted(
                f"interrupted by {signame} while writing to {self.root}; " + self._put_back(),
                signal=signame,
            ) from None
        except BaseException:
            if not (renamed and not journal.exists(root)):
                self._put_back()
            raise
        for _path, real, content in plan:
            if content is None:
                self._remove_empty_parents(real)
        return [path for path, _real, _content in plan]

    def recover_interrupted(self, *, strict: bool = False) -> journal.Recovery | None:
        """Undo an earlier write that was killed midway (its journal is still here); None if none.

        With ``strict`` (a write is about to start) a recovery that cannot finish is an error."""
        if not journal.exists(self._real_root):
            # A run killed while it wrote the journal itself left only the journal's temporary file.
            journal.remove_temps(self._real_root)
            return None
        try:
            with _signals_blocked():
                done = journal.recover(self._real_root)
        except OSError as exc:
            raise TreeWriteError(
                f"{self.root} holds the journal of an interrupted write that cannot be read: "
                f"{exc.strerror}",
                hint=f"restore the directory from the package (reinstall it), then remove "
                f"{_show(journal.path_of(self._real_root))}",
            ) from None
        self.recovered = done
        if done.failed and strict:
            raise TreeWriteError(self._failed_text(done))
        return done

    def _put_back(self) -> str:
        """Roll back from the journal; the text says what is now on disk (never a guess)."""
        with _signals_blocked():
            if not journal.exists(self._real_root):  # stopped while the journal was written
                journal.remove_temps(self._real_root)
                return "nothing was changed"
            try:
                done = journal.recover(self._real_root)
            except OSError as exc:
                return f"putting it back failed ({exc.strerror}); run apply again to finish"
        if done.failed:
            return self._failed_text(done)
        return "nothing was changed (every file was put back)"

    def _failed_text(self, done: journal.Recovery) -> str:
        shown = ", ".join(f"{_show(p)} ({why})" for p, why in done.failed[:5])
        more = f" and {len(done.failed) - 5} more" if len(done.failed) > 5 else ""
        return (
            f"putting back {len(done.failed)} files failed: {shown}{more}; they may still be "
            f"patched; the journal {_show(journal.path_of(self._real_root))} keeps their "
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

    def _recheck(self, real: bytes) -> None:
        """The write-time half of the path check: no directory on the way became a symlink (or
        moved) since ``resolve``; otherwise the rename would land wherever the link points."""
        parent = os.path.dirname(real)
        if os.path.realpath(parent) != parent:
            raise OSError(
                0, "a directory on the way was replaced by a symlink during the write", real
            )

    def _remove_empty_parents(self, real: bytes) -> None:
        """After a deletion, remove the directories it left empty, as GNU patch does."""
        parent = os.path.dirname(real)
        while parent != self._real_root and parent.startswith(self._real_root + b"/"):
            try:
                os.rmdir(parent)
            except OSError:
                return  # not empty (or not ours to remove): stop climbing
            parent = os.path.dirname(parent)


def _snapshot_file(real: bytes) -> tuple[bytes, int] | None:
    """A file's bytes and permission bits, to put it back if the write fails; None if absent."""
    try:
        with open(real, "rb") as handle:
            info = os.fstat(handle.fileno())
            return handle.read(), stat.S_IMODE(info.st_mode)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None  # no file there (a directory in the way fails later, at the rename)


def _missing_dirs(parents: Iterable[bytes]) -> list[bytes]:
    """The directories a write must create, outermost first (recorded in the journal first)."""
    missing: set[bytes] = set()
    for parent in set(parents):
        current = parent
        while current not in missing and not os.path.isdir(current):
            missing.add(current)
            current = os.path.dirname(current)
    return sorted(missing, key=lambda d: (d.count(b"/"), d))


# Creating a file costs 0.3 ms of kernel time on these machines, whoever does it; a few threads
# overlap that (100 files: 36 -> 22 ms with two). Below this many files one thread is as fast.
PARALLEL_WRITES_FROM = 16


def _write_temps(
    jobs: Sequence[tuple[bytes, bytes, int]],
) -> tuple[dict[bytes, bytes], tuple[bytes, BaseException] | None]:
    """Write each (target, content, mode) to a temporary file beside its target; returns the
    temporaries by target, and the first failure (its target and error) if any."""
    temps: dict[bytes, bytes] = {}

    def write(job: tuple[bytes, bytes, int]) -> None:
        real, content, mode = job
        temps[real] = journal.write_temp(os.path.dirname(real), content, mode)

    return temps, _each(jobs, write)


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

    def work() -> None:
        for job in order:
            if stop.is_set():
                return
            try:
                fn(job)
            except BaseException as exc:
                failures.append((job[0], exc))
                stop.set()
                return

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    try:  # a signal may land while the threads start, as well as while they run
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    except BaseException:
        stop.set()
        with _signals_blocked():
            for t in threads:
                if t.ident is not None:  # started
                    t.join()
        raise
    return failures[0] if failures else None


def _mode_for(existing: int | None, wanted: int | None) -> int:
    """Keep an existing file's permissions; a git mode (100755) picks them; new files get 0644."""
    if wanted is not None:
        return 0o755 if wanted & 0o111 else 0o644
    return existing if existing is not None else 0o644


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
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    if not _in_main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
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
    root: Path, patches: Sequence[Patch], policy: Policy, *, dry_run: bool = False
) -> TreeApplyResult:
    """Take the rows ``root`` carries out again, all or nothing (journaled like ``apply_to_tree``)."""
    return _carry(root, patches, policy, dry_run, unapply_carried)


def _carry(
    root: Path,
    patches: Sequence[Patch],
    policy: Policy,
    dry_run: bool,
    plan: Callable[[Sequence[Patch], Callable[[bytes], bytes | None], Policy], CarriedResult],
) -> TreeApplyResult:
    """The directory side of both: repair an interrupted write, plan in memory, write all or nothing."""
    tree = Tree(root)
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
    )


@record(slots=True)
class TreeCheckResult:
    """``apply --check-applied``: does the directory carry each patch?"""

    root: Path
    patches: list[PresenceResult]

    @property
    def ok(self) -> bool:
        return all(p.status == "present" for p in self.patches)


def check_applied(root: Path, patches: Sequence[Patch], policy: Policy) -> TreeCheckResult:
    """Verify, in memory and read-only, that ``root`` already carries every patch."""
    tree = Tree(root)
    tree.refuse_if_interrupted()
    return TreeCheckResult(root=root, patches=verify_applied(patches, tree.read, policy))


def misplaced(root: Path, patches: Sequence[Patch]) -> str | None:
    """Why ``root`` cannot be the directory the patches apply in, or None.

    A series edits existing files; when not one of the top-level directories those files live in
    exists under ``root`` (a venv root given for its site-packages), every hunk would fail, and 17
    "file not found" errors hide the one mistake.
    """
    if not root.is_dir():
        return "it is not a directory" if root.exists() else "it does not exist"
    tops = sorted(
        {
            fp.old_path.split(b"/", 1)[0]
            for patch in patches
            for fp in patch.files
            if fp.old_path is not None and b"/" in fp.old_path
        }
    )
    if not tops or any(os.path.isdir(os.path.join(os.fsencode(root), top)) for top in tops):
        return None
    names = ", ".join(t.decode("utf-8", errors="backslashreplace") + "/" for t in tops)
    return f"the patches edit files under {names} and {root} has no such directory"
