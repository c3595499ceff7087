"""A directory on disk as the engine sees it: safe reads of the touched files, all-or-nothing writes.

``Tree.read`` is the engine's reader: it refuses paths that escape the directory (absolute, ``..``, or
through a symlink pointing outside it) and records what it read, so tests can show that applying a
series reads only the files the patches touch.

``Tree.write`` is all or nothing: every new file is first written to a temporary file beside its target,
and only when all of them are written are they renamed into place (the originals kept as hard-link
backups until the last rename succeeded, so a failure midway restores them). On any failure the
directory is left byte for byte as it was.

``apply_to_tree`` and ``check_applied`` are the two operations ``apply`` runs: parse nothing, place
everything in memory (``engine.apply_series``), then write only if every hunk of every patch applied.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hyperqwen_patches.engine.applying import (
    Policy,
    PresenceResult,
    SeriesResult,
    apply_series,
    verify_applied,
)
from hyperqwen_patches.engine.patchset import Patch
from hyperqwen_patches.errors import HqpError, UsageError

_TEMP_PREFIX = b".hqp-tmp-"
_BACKUP_PREFIX = b".hqp-bak-"


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

    def resolve(self, path: bytes) -> bytes:
        """The real on-disk path for ``path``; raises TreeError if it would leave the directory."""
        if not path or path.startswith(b"/"):
            raise TreeError(
                f"path {_show(path)!r} is absolute or empty: it would escape {self.root}"
            )
        if any(part == b".." for part in path.split(b"/")):
            raise TreeError(f"path {_show(path)!r} contains '..': it would escape {self.root}")
        joined = os.path.join(self._real_root, path)
        # realpath follows every symlink on the way, including ones not yet created at the tail.
        real = os.path.realpath(joined)
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
                return handle.read()
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
        """Write ``changes`` (None = delete) all or nothing; returns the paths changed, sorted."""
        modes = modes or {}
        plan = [(path, self.resolve(path), changes[path]) for path in sorted(changes)]
        temps: list[tuple[bytes, bytes]] = []  # (temp, real target)
        made_dirs: list[bytes] = []
        backups: list[tuple[bytes, bytes]] = []  # (backup, real target)
        done: list[bytes] = []  # real targets already replaced or removed
        try:
            # Phase 1: every new content to a temporary file beside its target. Nothing visible yet.
            for path, real, content in plan:
                if content is None:
                    continue
                parent = os.path.dirname(real)
                made_dirs.extend(_make_dirs(parent))
                fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=parent)
                temps.append((temp, real))
                with os.fdopen(fd, "wb") as handle:
                    handle.write(content)
                os.chmod(temp, _mode_for(real, modes.get(path)))
            # Phase 2: back up what will be replaced or deleted (hard links: no copy, same inode).
            for _path, real, _content in plan:
                if os.path.lexists(real):
                    backup = _backup_name(real)
                    try:
                        os.link(real, backup)
                    except OSError:
                        shutil.copy2(real, backup)
                    backups.append((backup, real))
            # Phase 3: rename into place and delete. Each rename is atomic.
            temp_for = {real: temp for temp, real in temps}
            for _path, real, content in plan:
                if content is None:
                    if os.path.lexists(real):
                        os.unlink(real)
                else:
                    os.replace(temp_for[real], real)
                done.append(real)
        except OSError as exc:
            _rollback(temps, backups, done, made_dirs)
            raise TreeWriteError(
                f"writing to {self.root} failed ({exc.strerror}: {_show(os.fsencode(exc.filename or ''))}); "
                "nothing was changed"
            ) from None
        except BaseException:
            _rollback(temps, backups, done, made_dirs)
            raise
        for backup, _real in backups:
            with contextlib.suppress(OSError):
                os.unlink(backup)
        return [path for path, _real, _content in plan]


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


def _backup_name(real: bytes) -> bytes:
    fd, name = tempfile.mkstemp(prefix=_BACKUP_PREFIX, dir=os.path.dirname(real))
    os.close(fd)
    os.unlink(name)
    return name


def _mode_for(real: bytes, wanted: int | None) -> int:
    """Keep an existing file's permissions; a git mode (100755) picks them; new files get 0644."""
    if wanted is not None:
        return 0o755 if wanted & 0o111 else 0o644
    try:
        return stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        return 0o644


def _rollback(
    temps: Sequence[tuple[bytes, bytes]],
    backups: Sequence[tuple[bytes, bytes]],
    done: Sequence[bytes],
    made_dirs: Sequence[bytes],
) -> None:
    """Put the directory back as it was: restore replaced or deleted files, drop temps and new dirs."""
    backed_up = {real: backup for backup, real in backups}
    for real in done:
        if real in backed_up:
            with contextlib.suppress(OSError):
                os.replace(backed_up.pop(real), real)
        else:
            with contextlib.suppress(OSError):
                os.unlink(real)  # a file we created
    for backup in backed_up.values():
        with contextlib.suppress(OSError):
            os.unlink(backup)
    for temp, _real in temps:
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

    @property
    def ok(self) -> bool:
        return self.series.ok


def apply_to_tree(
    root: Path, patches: Sequence[Patch], policy: Policy, *, dry_run: bool = False
) -> TreeApplyResult:
    """Place every hunk of every patch in memory; write only when all applied (and not a dry run)."""
    tree = Tree(root)
    series = apply_series(patches, tree.read, policy)
    written: list[bytes] = []
    if series.ok and not dry_run:
        written = tree.write(series.changes, series.modes)
    return TreeApplyResult(
        root=root, series=series, dry_run=dry_run, written=written, reads=list(tree.reads)
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
