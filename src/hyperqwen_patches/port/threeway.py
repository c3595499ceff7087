"""A row that does not apply at fuzz 0 on the new release, merged in three ways as a cherry-pick would.

For each file the row touches there are three versions: the file before the row and after it on the
old release (the pin with the rows before it: by replay identity, the old fork commit's parent and the
commit), and the file as the rebased branch has it now. ``git merge-file`` carries the row's change
(before -> after) onto the current file. A change the release made elsewhere in the file, even inside
the hunk's context lines, merges cleanly; a change to the same or an adjacent line is a conflict, and
the file is kept with diff3 markers for a person, unless the two changes only touch and
port/adjacent.py can combine them mechanically (an insertion next to a reworded line, two insertions
at one place, ...): then the file is "adjacent", with the lines a person should read.

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
from hyperqwen_patches.port import adjacent
from hyperqwen_patches.records import record

Reader = Callable[[bytes], bytes | None]


@record(frozen=True)
class FileMerge:
    """One file of a merged row: what the branch gets (None: the file goes) and how it was decided."""

    path: bytes
    content: bytes | None
    # "row" (the release left the file as the pin had it: the row's version), "same" (the release
    # already has the row's version), "merged" (merge-file combined both), "adjacent" (merge-file
    # paused where the two changes only touch, and adjacent.py combined them), "conflict" (markers left),
    # "removed-upstream" (the row changes a file the release no longer has: kept as the row left it,
    # for a person), "modify-delete" (the row deletes a file the release changed)
    how: str
    conflicts: int = 0  # conflict blocks merge-file left
    # "adjacent": (line in the merged file, which changes met there), one per combined region
    review: tuple[tuple[int, str], ...] = ()
    # "conflict": why the conflicts could not be merged as changes that only touch
    why: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        return self.how in ("row", "same", "merged", "adjacent")

    def to_json(self) -> dict[str, object]:
        return {
            "path": show(self.path),
            "how": self.how,
            "conflicts": self.conflicts,
            "adjacent": [{"line": line, "what": what} for line, what in self.review],
            "why": list(self.why),
        }


@record(frozen=True)
class RowMerge:
    files: tuple[FileMerge, ...]

    @property
    def clean(self) -> bool:
        return all(f.clean for f in self.files)

    @property
    def merged_paths(self) -> tuple[bytes, ...]:
        """Files where both sides' changes were combined (what a reviewer should read)."""
        return tuple(f.path for f in self.files if f.how in ("merged", "adjacent"))

    @property
    def adjacent(self) -> tuple[tuple[bytes, int, str], ...]:
        """(file, line, which changes met) where changes that only touch were combined."""
        return tuple((f.path, line, what) for f in self.files for line, what in f.review)

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
            if not conflicts:
                files.append(FileMerge(path, merged, "merged"))
                continue
            touching = _touching(path, base, ours, theirs, merged, labels)
            if isinstance(touching, FileMerge):
                files.append(touching)
            else:
                files.append(FileMerge(path, merged, "conflict", conflicts, why=touching))
    return RowMerge(tuple(files))


def _touching(
    path: bytes,
    base: bytes | None,
    ours: bytes,
    theirs: bytes,
    marked: bytes,
    labels: Sequence[str],
) -> FileMerge | tuple[str, ...]:
    """The file merged where merge-file's conflicts are only changes that touch (adjacent.py), or
    why it stays a conflict, for the person who resolves it."""
    if base is None:
        return ("both sides created the file",)
    combined = adjacent.merge(base, ours, theirs)
    if combined.content is None:
        return tuple(dict.fromkeys(f"{c.reason} (line {c.base_line} before the row)"
                                   for c in combined.clashes))  # fmt: skip
    if not combined.adjacent or not fits_outside_conflicts(combined.content, marked, labels):
        return ()  # the two diffs aligned lines differently: git's conflict stands, unexplained
    review = tuple((a.line, a.what) for a in combined.adjacent)
    return FileMerge(path, combined.content, "adjacent", 0, review)


def fits_outside_conflicts(result: bytes, marked: bytes, labels: Sequence[str]) -> bool:
    """Whether ``result`` holds every part of merge-file's output ``marked`` outside its conflict
    blocks, in order, from its first byte to its last. The adjacency merge aligns lines with its
    own diff; where that alignment would differ from git's anywhere git merged cleanly, git's word
    stands and the file stays a conflict (a second opinion that disagrees is not a merge)."""
    start = _marker(b"<<<<<<<", labels[0])
    end = _marker(b">>>>>>>", labels[2])
    parts: list[bytes] = [b""]
    inside = False
    for line in adjacent.split_lines(marked):
        bare = line.rstrip(b"\r\n")
        if not inside and bare == start:
            inside = True
        elif inside and bare == end:
            inside = False
            parts.append(b"")
        elif not inside:
            parts[-1] += line
    if inside or len(parts) == 1:
        return False  # not merge-file's diff3 output with these labels
    first, *middle, last = parts
    if not result.startswith(first) or not result.endswith(last):
        return False
    at = len(first)
    for part in middle:
        found = result.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return at <= len(result) - len(last)


def _marker(kind: bytes, label: str) -> bytes:
    return kind + b" " + label.encode("utf-8", "surrogateescape")  # git writes the space always
