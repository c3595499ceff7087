"""A row that does not apply at fuzz 0 on the new release, merged in three ways as a cherry-pick would.

For each file the row touches there are three versions: the file before the row and after it on the
old release (the pin with the rows before it: by replay identity, the old fork commit's parent and the
commit), and the file as the rebased branch has it now. ``git merge-file`` carries the row's change
(before -> after) onto the current file. A change the release made elsewhere in the file, even inside
the hunk's context lines, merges cleanly; a change to the same or an adjacent line is a conflict, and
the file is kept with diff3 markers for a person.

Creation, deletion and a file the release removed are decided here, not by merge-file: they have no
text to merge.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from hyperqwen_patches import gitrun
from hyperqwen_patches.console import show
from hyperqwen_patches.errors import GitError
from hyperqwen_patches.records import record

Reader = Callable[[bytes], bytes | None]


@record(frozen=True)
class FileMerge:
    """One file of a merged row: what the branch gets (None: the file goes) and how it was decided."""

    path: bytes
    content: bytes | None
    # "row" (the release left the file as the pin had it: the row's version), "same" (the release
    # already has the row's version), "merged" (merge-file combined both), "conflict" (markers left),
    # "removed-upstream" (the row changes a file the release no longer has: kept as the row left it,
    # for a person), "modify-delete" (the row deletes a file the release changed)
    how: str
    conflicts: int = 0  # conflict blocks merge-file left

    @property
    def clean(self) -> bool:
        return self.how in ("row", "same", "merged")

    def to_json(self) -> dict[str, object]:
        return {"path": show(self.path), "how": self.how, "conflicts": self.conflicts}


@record(frozen=True)
class RowMerge:
    files: tuple[FileMerge, ...]

    @property
    def clean(self) -> bool:
        return all(f.clean for f in self.files)

    @property
    def merged_paths(self) -> tuple[bytes, ...]:
        """Files where both sides' changes were combined (what a reviewer should read)."""
        return tuple(f.path for f in self.files if f.how == "merged")

    @property
    def conflicted(self) -> tuple[FileMerge, ...]:
        return tuple(f for f in self.files if not f.clean)


def merge_text(
    current: bytes, base: bytes, theirs: bytes, labels: Sequence[str]
) -> tuple[bytes, int]:
    """``git merge-file -p --diff3``: ``base -> theirs`` carried onto ``current``; (result, conflict
    blocks). ``labels`` name the three sides in the markers (current, base, theirs)."""
    with tempfile.TemporaryDirectory(prefix="hqp-merge-") as tmp:
        names = []
        for name, data in (("current", current), ("base", base), ("theirs", theirs)):
            path = Path(tmp) / name
            path.write_bytes(data)
            names.append(str(path))
        args: list[str] = ["merge-file", "-p", "--diff3"]
        for label in labels:
            args += ["-L", label]
        result = gitrun.run([*args, *names], git_dir=None, cwd=Path(tmp))
    # merge-file exits with the number of conflicts (capped at 127); negative (255 here) on error.
    if result.code < 0 or result.code > 127:
        message = result.stderr.decode("utf-8", "backslashreplace").strip()
        raise GitError(f"git merge-file failed: {message or f'exit {result.code}'}")
    return result.stdout, result.code


def merge_row(
    paths: Sequence[bytes],
    before: Reader,
    after: Reader,
    current: Reader,
    labels: Sequence[str],
) -> RowMerge:
    """Merge the row's change to each of ``paths`` (``before`` -> ``after``) into ``current``."""
    files: list[FileMerge] = []
    for path in paths:
        base, theirs, ours = before(path), after(path), current(path)
        if theirs == base:
            continue  # the row does not change this path (a rename's other side, say)
        if ours == base:
            files.append(FileMerge(path, theirs, "row"))
        elif ours == theirs:
            files.append(FileMerge(path, theirs, "same"))
        elif theirs is None:
            files.append(FileMerge(path, ours, "modify-delete"))
        elif ours is None:
            files.append(FileMerge(path, theirs, "removed-upstream"))
        else:
            merged, conflicts = merge_text(ours, base or b"", theirs, labels)
            how = "conflict" if conflicts else "merged"
            files.append(FileMerge(path, merged, how, conflicts))
    return RowMerge(tuple(files))
