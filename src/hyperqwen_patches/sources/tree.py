"""A directory on disk as the engine sees it: safe reads of the touched files, all-or-nothing writes.

``Tree.read`` is the engine's reader: it refuses paths that escape the directory (absolute, ``..``, or
through a symlink pointing outside it) and records what it read, so tests can show that applying a
series reads only the files the patches touch.

``Tree.write`` is all or nothing: every new file is first written to a temporary file beside its target,
and only when all of them are written are they renamed into place; the original bytes and permissions
stay in memory until the last rename succeeded, so a failure midway puts every file back. On any
failure the directory is left byte for byte as it was.

``apply_to_tree`` and ``check_applied`` are the two operations ``apply`` runs: parse nothing, place
everything in memory (``engine.apply_series``), then write only if every hunk of every patch applied.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hyperqwen_patches.engine.applying import (
    Policy,
    PresenceResult,
    SeriesResult,
    verify_applied,
)
from hyperqwen_patches.engine.carried import apply_carried
from hyperqwen_patches.engine.patchset import Patch
from hyperqwen_patches.errors import HqpError, UsageError

_TEMP_PREFIX = b".hqp-tmp-"


class TreeError(UsageError):
    """A path that is unsafe or unusable in the target directory (escapes it, is a directory, ...)."""


class TreeWriteError(HqpError):
    """Writing the changes failed (disk full, permissions); the directory was restored."""


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

    def resolve(self, path: bytes) -> bytes:
        """The real on-disk path for ``path``; raises TreeError if it would leave the directory."""
        if not path or path.startswith(b"/"):
            raise TreeError(
                f"path {_show(path)!r} is absolute or empty: it would escape {self.root}"
            )
        if any(part == b".." for part in path.split(b"/")):
            raise TreeError(f"path {_show(path)!r} contains '..': it would escape {self.root}")
        parent, _, name = path.rpartition(b"/")
        real_parent = self._dirs.get(parent)
        if real_parent is None:
            # realpath follows every symlink on the way, including ones not yet created at the tail;
            # a directory's real path is cached, since a series touches many files per directory.
            real_parent = os.path.realpath(os.path.join(self._real_root, parent))
            self._dirs[parent] = real_parent
        real = os.path.join(real_parent, name)
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

        Phase 1 writes every new content to a temporary file beside its target (nothing visible
        yet); phase 2 renames each into place (atomic per file) and removes deletions. If anything
        fails, temporary files are removed and every file already replaced or removed is put back
        from the original bytes kept in memory (the engine read them all before deciding), with its
        permissions. No backup files are made: on a disk mounted with ``discard`` each extra file
        created and removed costs more than the whole engine.
        """
        modes = modes or {}
        plan = [(path, self.resolve(path), changes[path]) for path in sorted(changes)]
        originals: dict[bytes, tuple[bytes, int] | None] = {}
        for path, real, _content in plan:
            seen = self._seen.get(path)
            if seen is None:
                originals[real] = _snapshot_file(real)
            else:
                try:
                    originals[real] = (seen, stat.S_IMODE(os.stat(real).st_mode))
                except (FileNotFoundError, NotADirectoryError):
                    originals[real] = None
        temps: dict[bytes, bytes] = {}  # real target -> temp
        made_dirs: list[bytes] = []
        known_dirs: set[bytes] = set()
        done: list[bytes] = []  # real targets already replaced or removed
        try:
            for path, real, content in plan:
                if content is None:
                    continue
                parent = os.path.dirname(real)
                if parent not in known_dirs:
                    made_dirs.extend(_make_dirs(parent))
                    known_dirs.add(parent)
                original = originals[real]
                mode = _mode_for(original[1] if original else None, modes.get(path))
                temps[real] = _write_temp(parent, content, mode)
            for _path, real, content in plan:
                if content is None:
                    if originals[real] is not None:
                        os.unlink(real)
                else:
                    os.replace(temps[real], real)
                    del temps[real]  # only once renamed: a failed rename leaves it to clean up
                done.append(real)
        except OSError as exc:
            _rollback(temps, originals, done, made_dirs)
            name = _show(os.fsencode(exc.filename)) if exc.filename else "?"
            raise TreeWriteError(
                f"writing to {self.root} failed ({exc.strerror}: {name}); nothing was changed"
            ) from None
        except BaseException:
            _rollback(temps, originals, done, made_dirs)
            raise
        for _path, real, content in plan:
            if content is None:
                self._remove_empty_parents(real)
        return [path for path, _real, _content in plan]

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


def _write_temp(parent: bytes, content: bytes, mode: int) -> bytes:
    """A new temporary file beside its target holding ``content`` with permissions ``mode``."""
    fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=parent)
    try:
        view = memoryview(content)
        while view:  # os.write may write less than asked
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        os.unlink(temp)
        raise
    os.close(fd)
    return temp


def _make_dirs(parent: bytes) -> list[bytes]:
    """Create missing directories; return the ones created (outermost first) for rollback."""
    missing: list[bytes] = []
    current = parent
    while not os.path.isdir(current):
        missing.append(current)
        current = os.path.dirname(current)
    for directory in reversed(missing):
        os.mkdir(directory)
    return list(reversed(missing))


def _mode_for(existing: int | None, wanted: int | None) -> int:
    """Keep an existing file's permissions; a git mode (100755) picks them; new files get 0644."""
    if wanted is not None:
        return 0o755 if wanted & 0o111 else 0o644
    return existing if existing is not None else 0o644


def _rollback(
    temps: Mapping[bytes, bytes],
    originals: Mapping[bytes, tuple[bytes, int] | None],
    done: Sequence[bytes],
    made_dirs: Sequence[bytes],
) -> None:
    """Put the directory back as it was: restore replaced or deleted files, drop temps and new dirs."""
    for real in done:
        original = originals[real]
        with contextlib.suppress(OSError):
            if original is None:
                os.unlink(real)  # a file we created
            else:
                content, mode = original
                os.replace(_write_temp(os.path.dirname(real), content, mode), real)
    for temp in temps.values():
        with contextlib.suppress(OSError):
            os.unlink(temp)
    for directory in reversed(made_dirs):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


@dataclass(slots=True)
class TreeApplyResult:
    """What ``apply`` did to a directory: the engine's result and the files written (if any)."""

    root: Path
    series: SeriesResult
    dry_run: bool
    written: list[bytes] = field(default_factory=list)
    reads: list[bytes] = field(default_factory=list)
    carried: int = 0  # leading rows DIR carried already (engine/carried.py)
    refused: str | None = None  # why DIR's state was refused: rows carried out of order, or partly

    @property
    def ok(self) -> bool:
        return self.series.ok


def apply_to_tree(
    root: Path, patches: Sequence[Patch], policy: Policy, *, dry_run: bool = False
) -> TreeApplyResult:
    """Place every hunk of every patch in memory; write only when all applied (and not a dry run).

    A tree that already carries the first rows of the series gets the rest; one that carries all of it
    is left alone (``engine/carried.py``)."""
    tree = Tree(root)
    outcome = apply_carried(patches, tree.read, policy)
    series = outcome.series
    written: list[bytes] = []
    if series.ok and not dry_run and series.changes:
        written = tree.write(series.changes, series.modes)
    return TreeApplyResult(
        root=root,
        series=series,
        dry_run=dry_run,
        written=written,
        reads=list(tree.reads),
        carried=outcome.carried,
        refused=outcome.refused,
    )


@dataclass(slots=True)
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
