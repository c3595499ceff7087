"""A tree while rows are applied to it: ``path -> (mode, blob)`` over a base commit, one row at a time.

Replay (``check``), ``import``, the row commands and ``port --rebase`` all apply rows this way: the
engine at fuzz 0 on the state's reader, the result folded into entries a commit can be written from
(``take_changes``) or compared with a fork commit (``entries``, ``take_dirty``). Nothing here writes;
blobs are read from git only when a row touches them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

from hyperqwen_patches import gitrun
from hyperqwen_patches.console import show
from hyperqwen_patches.errors import FindingError
from hyperqwen_patches.fork import reading as forkgit

if TYPE_CHECKING:
    from hyperqwen_patches.engine.applying import SeriesResult
    from hyperqwen_patches.engine.patchmodel import Patch

Reader = Callable[[bytes], bytes | None]
Entry = tuple[int, str]  # (mode, blob sha)

DEFAULT_MODE = 0o100644


class BaseEntries:
    """The base commit's tree entries, computed on demand from the pristine tree it was built from.

    The base commit is the pristine tree's text files, every mode 100644 (basecommit.py), so the entry
    of a path is ``(0o100644, blob sha of pristine.read(path))``: replay needs it only for the paths the
    rows or the fork commits touch, and computing those few costs nothing like listing the whole tree
    (``ls-tree -r`` of 30,000 files and parsing it). ``full()`` lists it when a caller needs every path.
    Only valid for a base built from ``read`` (check's fork session builds it so).
    """

    def __init__(self, read: Reader, full: Callable[[], dict[bytes, Entry]]) -> None:
        self._read = read
        self._full = full
        self._memo: dict[bytes, Entry | None] = {}

    def get(self, path: bytes) -> Entry | None:
        if path not in self._memo:
            data = self._read(path)
            self._memo[path] = None if data is None else (DEFAULT_MODE, forkgit.blob_sha(data))
        return self._memo[path]

    def full(self) -> dict[bytes, Entry]:
        return self._full()


class LazyEntries(MutableMapping[bytes, Entry]):
    """A tree's entries as changes over :class:`BaseEntries`; iterating lists the base (rarely needed)."""

    def __init__(self, base: BaseEntries) -> None:
        self._base = base
        self._over: dict[bytes, Entry | None] = {}  # None: deleted

    def __getitem__(self, path: bytes) -> Entry:
        entry = self._over[path] if path in self._over else self._base.get(path)
        if entry is None:
            raise KeyError(path)
        return entry

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, bytes):
            return False
        if path in self._over:
            return self._over[path] is not None
        return self._base.get(path) is not None

    def __setitem__(self, path: bytes, entry: Entry) -> None:
        self._over[path] = entry

    def __delitem__(self, path: bytes) -> None:
        if path not in self:
            raise KeyError(path)
        self._over[path] = None

    def _all(self) -> dict[bytes, Entry]:
        merged = dict(self._base.full())
        for path, entry in self._over.items():
            if entry is None:
                merged.pop(path, None)
            else:
                merged[path] = entry
        return merged

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class TreeState:
    """A tree as ``path -> (mode, content or blob sha)`` on top of a base, updated one row at a time."""

    def __init__(
        self, base_entries: Mapping[bytes, Entry] | LazyEntries, read_base: Reader
    ) -> None:
        self.entries: MutableMapping[bytes, Entry] = (
            base_entries if isinstance(base_entries, LazyEntries) else dict(base_entries)
        )
        self.content: dict[bytes, bytes] = {}
        self._read_base = read_base
        # Paths whose entry may have changed since the last take_dirty() (what a comparison rechecks).
        self.dirty: set[bytes] = set()
        # Paths whose entry may have changed since the last commit written (take_changes()).
        self.uncommitted: set[bytes] = set()

    def take_dirty(self) -> set[bytes]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def take_changes(self) -> list[tuple[bytes, int | None, bytes | str | None]]:
        """What changed since the last call, as ``commitstream.Change``: (path, mode, content or
        blob SHA) for a path the tree has, (path, None, None) for one it no longer has."""
        out: list[tuple[bytes, int | None, bytes | str | None]] = []
        for path in sorted(self.uncommitted):
            if path in self.entries:
                mode, sha = self.entries[path]
                out.append((path, mode, self.content.get(path, sha)))
            else:
                out.append((path, None, None))
        self.uncommitted = set()
        return out

    def read(self, path: bytes) -> bytes | None:
        if path in self.content:
            return self.content[path]
        if path not in self.entries:
            return None
        return self._read_base(path)

    def apply_changes(
        self, patch: Patch, changes: Mapping[bytes, bytes | None], modes: Mapping[bytes, int]
    ) -> None:
        """Fold one row's engine result into the state (renames keep the old file's mode)."""
        carried: dict[bytes, int] = {}
        for fp in patch.files:
            if (
                fp.rename
                and fp.old_path is not None
                and fp.old_path in self.entries
                and fp.new_path is not None
            ):
                carried[fp.new_path] = self.entries[fp.old_path][0]
        self.dirty.update(changes)
        self.dirty.update(modes)
        self.uncommitted.update(changes)
        self.uncommitted.update(modes)
        for path, data in changes.items():
            if data is None:
                self.entries.pop(path, None)
                self.content.pop(path, None)
                continue
            mode = modes.get(path) or carried.get(path)
            if mode is None:
                mode = self.entries[path][0] if path in self.entries else DEFAULT_MODE
            self.entries[path] = (mode, forkgit.blob_sha(data))
            self.content[path] = data
        for path, mode in modes.items():
            if path in self.entries and path not in changes:
                self.entries[path] = (mode, self.entries[path][1])


def tree_entries(git_dir: Path, treeish: str) -> dict[bytes, tuple[int, str]]:
    return {p: (int(m, 8), s) for p, (m, s) in forkgit.ls_tree(git_dir, treeish).items()}


def state_of_commit(
    git_dir: Path, commit: str, known: Reader | None = None, *, base: str | None = None
) -> TreeState:
    """The tree of ``commit`` as a state rows can be applied to. Blobs are read from git when asked
    for, except where ``known`` (a pristine tree the commit was built on) has the same bytes. With
    ``base`` (the commit of ``known``), every blob that differs from it is read up front in one git
    call (a rebase's rows change tens of files; one git process each was most of a --continue)."""
    entries = tree_entries(git_dir, commit)
    fetched: dict[str, bytes] = {}
    if base is not None:
        out = gitrun.check(
            [*forkgit.DIFF_TREE_ARGS, "--no-renames", base, commit],
            git_dir=git_dir,
            what=f"listing the files {commit[:12]} changed",
        )
        fields = out.split(b"\0")
        shas = {
            meta.split(b" ")[3].decode()
            for meta in fields[0::2]
            if meta.startswith(b":") and not meta.endswith(b"D")
        }
        fetched = forkgit.read_objects(git_dir, sorted(shas), kind="blob")

    def read(path: bytes) -> bytes | None:
        sha = entries[path][1]
        if sha in fetched:
            return fetched[sha]
        data = known(path) if known is not None else None
        if data is not None and forkgit.blob_sha(data) == sha:
            return data
        return forkgit.read_blob(git_dir, sha)

    return TreeState(entries, read)


def row_result(patch: Patch, read: Reader, *, row: str) -> SeriesResult:
    """One row's engine patch applied at fuzz 0 on ``read``; a failure raises naming the row, file
    and hunk."""
    from hyperqwen_patches.engine.applying import Policy, apply_series

    result = apply_series([patch], read, Policy())
    if not result.ok:
        raise RowDoesNotApply(row, _failure_text(result))
    return result


def apply_row(state: TreeState, patch: Patch, *, row: str) -> None:
    """Apply one row's engine patch on the state; a failure raises naming the row, file and hunk."""
    result = row_result(patch, state.read, row=row)
    state.apply_changes(patch, result.changes, result.modes)


class RowDoesNotApply(FindingError):
    def __init__(self, row: str, detail: str) -> None:
        super().__init__(f"row {row} does not apply at fuzz 0: {detail}")
        self.row = row
        self.detail = detail


def _failure_text(result: SeriesResult) -> str:
    parts = []
    for patch in result.patches:
        for file in patch.files:
            if file.status == "failed" or file.error:
                bad = [h.number for h in file.hunks if h.status in ("failed", "ambiguous")]
                where = f" hunk(s) {', '.join(map(str, bad))}" if bad else ""
                parts.append(f"{show(file.path)}{where}: {file.error or 'failed'}")
        if patch.error:
            parts.append(patch.error)
    return "; ".join(parts) or "failed"
